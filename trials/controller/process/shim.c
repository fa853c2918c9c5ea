/* The exec shim every replica starts through (trials/controller/process/shim.py builds it with cc).
 *
 * It does, in order, what Python could only do between fork and exec (preexec_fn forces a full
 * fork of the controller): die with the controller (PR_SET_PDEATHSIG), join the replica's cgroup
 * so every descendant is tracked, and optionally build the replica's container view in a new mount
 * namespace. Then it execs the trainer.
 *
 * Joining a cgroup by writing to cgroup.procs takes the kernel's cgroup_threadgroup_rwsem for
 * writing, which waits for an RCU grace period: 10-17 ms per replica on this machine kind when
 * replicas start a few hundred ms apart (benchmarks/results/controller.json). A child born in the
 * cgroup (clone3 with CLONE_INTO_CGROUP, Linux >= 5.7) takes it only for reading. So with a cgroup
 * the shim clones the replica into it and stays as a small waiter: it leads the process group the
 * controller signals, ignores the signals aimed at the group (the replica gets them too), and exits
 * the way the replica did (its exit code, or the same signal), so the controller sees the same
 * status. Where clone3 cannot do it, the shim joins by writing to cgroup.procs and execs itself.
 *
 *   trials-shim PPID CGROUP_PROCS|- ERRFD|- [OP ...] -- PROGRAM [ARG ...]
 *
 * With `ns` (the sandbox) the replica also gets its own PID namespace: the shim stays outside as the
 * waiter (the pid the controller knows, the group's leader) and clones, with the namespaces and into
 * the cgroup, the namespace's PID 1, a tiny init. Init builds the view, mounts a fresh /proc (only
 * the replica's own processes: no /proc/<controller>/root, /fd, /environ to write through), forks
 * the trainer (PID 2), which drops to Docker's default capabilities and execs (/sys and Docker's
 * read-only /proc paths are read-only, so a root trainer writes no cgroup or sysctl), and reaps every
 * process of the namespace. When the trainer exits, init passes its wait status to the waiter
 * through a pipe and the waiter exits the same way; if other processes remain (setsid daemons)
 * init stays with them, no longer tied to the waiter, so the controller finds, names and kills
 * them as before. SIGKILL of init (the group's SIGKILL, cgroup.kill) ends the whole namespace.
 *
 * OPs, applied in order (bind and gcs sources are opened after `ns`, before any other mount):
 *   ns user|mount       first op: new mount and PID namespaces (user: also a user namespace mapping
 *                       our own uid/gid); the other ops run in init
 *   root NEWROOT LAYERS layered|read-only
 *                       the replica's view of the host's file system is built at NEWROOT (see "The
 *                       replica's view" below), its copy-on-write layers in LAYERS/<k>/{upper,work};
 *                       the later ops mount in it, and init enters it (pivot_root) after the last
 *   writable DIR        (read-only view) DIR gets a layer of its own, else it stays read-only
 *   overlay DIR UPPER WORK   DIR becomes a copy-on-write view of itself (writes go to UPPER; volatile:
 *                       its unmount syncs no file system)
 *   hide DIR            an empty tmpfs over DIR (later binds create their mount points in it)
 *   bind PATH           PATH (opened before any mount) mounted back over PATH, writable
 *   gcs SRC             SRC (opened before any mount) appears at /gcs (needs `root`)
 *   cd DIR              the working directory (entered after the mounts)
 *
 * Setup failures print one line "trials-shim: STEP: PATH: ERROR" to stderr and exit 125; an exec
 * failure exits 127. Both also write "ERRNO STEP: PATH: ERROR" to ERRFD (close-on-exec: the
 * controller reads EOF once the trainer runs), so the controller can raise instead of recording a
 * failed replica, as Popen does for a missing program.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <stdint.h>
#include <unistd.h>

/* Built with -DSHIM_LIBRARY (trials/controller/warm/library.py) the same code is a shared library for a
 * warm launcher's child (trials/controller/warm/): trials_shim_enter() does all main() does, but where the
 * trainer would be exec'd, it returns 0 in that process instead (already holding the trainer's modules):
 * the same cgroup, namespaces, view, /proc, capabilities and waiter as an exec'd trainer gets. */
#ifdef SHIM_LIBRARY
#include <setjmp.h>
static sigjmp_buf trainer_jump;  /* set by trials_shim_enter: the trainer's way back to its caller */
#define main shim_main
int shim_main(int argc, char **argv);
#endif

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

struct shim_clone_args {  /* struct clone_args of linux/sched.h, version 2 (with cgroup) */
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
        set_tid_size, cgroup;
};

#define MAX_FDS 64

static int errfd = -1;

static void report(int err, const char *step, const char *path) {
    fprintf(stderr, "trials-shim: %s: %s: %s\n", step, path, strerror(err));
    if (errfd >= 0) dprintf(errfd, "%d %s: %s: %s", err, step, path, strerror(err));
}

static int fail(const char *step, const char *path) {
    report(errno, step, path);
    _exit(125);
    return 125;
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) fail("open", path);
    ssize_t n = write(fd, text, strlen(text));
    if (n != (ssize_t)strlen(text)) fail("write", path);
    close(fd);
}

static void mkdirs(const char *path) {
    char buf[4096];
    size_t len = strlen(path);
    if (len >= sizeof buf) { errno = ENAMETOOLONG; fail("mkdir", path); }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == '\0') {
            char c = buf[i];
            buf[i] = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) fail("mkdir", buf);
            buf[i] = c;
        }
    }
}

static void bind_fd(int fd, const char *target) {
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    struct stat st;
    if (stat(target, &st) != 0) mkdirs(target);
    if (mount(src, target, NULL, MS_BIND | MS_REC, NULL) != 0) fail("bind", target);
}

/* Whether overlayfs takes `volatile` (Linux >= 5.10). Without it, the unmount at the namespace's end
 * runs syncfs on the whole file system under the upper layer: every replica's exit waited for the
 * write-back of every dirty page there (another trial's checkpoint, a dataset being unpacked), 159
 * ms with 300 MB dirty on this machine kind, seconds with more. The copy-on-write layer is thrown
 * away with the replica as a Vertex container's is (a new start gets a new one, so the "not mountable
 * again after a crash" rule of volatile never applies); what a trial keeps goes through the binds. */
static int has_volatile(void) {
    static int known = -1;
    if (known < 0) {
        struct utsname u;
        int major = 0, minor = 0;
        known = uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
                (major > 5 || (major == 5 && minor >= 10));
    }
    return known;
}

/* The flags a read-only remount must keep (a user namespace may not clear those of a locked mount). */
static unsigned long kept_flags(char *opts) {
    unsigned long flags = 0;
    char *save = NULL;
    for (char *tok = strtok_r(opts, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "nosuid") == 0) flags |= MS_NOSUID;
        else if (strcmp(tok, "nodev") == 0) flags |= MS_NODEV;
        else if (strcmp(tok, "noexec") == 0) flags |= MS_NOEXEC;
        else if (strcmp(tok, "noatime") == 0) flags |= MS_NOATIME;
        else if (strcmp(tok, "nodiratime") == 0) flags |= MS_NODIRATIME;
        else if (strcmp(tok, "relatime") == 0) flags |= MS_RELATIME;
    }
    return flags;
}

static void unescape_octal(char *s) {  /* mountinfo writes a space as \040, a backslash as \134 */
    char *out = s;
    for (char *in = s; *in; in++) {
        if (in[0] == '\\' && in[1] >= '0' && in[1] <= '3' && in[2] >= '0' && in[2] <= '7' &&
            in[3] >= '0' && in[3] <= '7') {
            *out++ = (char)((in[1] - '0') * 64 + (in[2] - '0') * 8 + (in[3] - '0'));
            in += 3;
        } else {
            *out++ = *in;
        }
    }
    *out = '\0';
}

/* --- The replica's view of the host's file system (`root`) -----------------------------------------
 *
 * Built at NEWROOT while the host's tree is still at /, then entered with pivot_root: the host's root
 * is detached, so nothing of it is reachable but what the view shows.
 *
 * As root (a mount namespace), the view is the host's whole file system copy-on-write: / is an overlay
 * whose lower layer is the host's root mount, and every mount under it gets its own overlay (a lower
 * layer is one mount, its submounts are not in it), each with its layer in LAYERS/<k>. Not overlaid:
 * /proc (a fresh one later), /dev and /sys (bound with their submounts: /sys is made read-only later,
 * /dev/shm gets a private tmpfs), a mount that only shows again a folder of its parent's layer (a bind
 * of the same file system: the parent's overlay shows it already), and mounts an overlay cannot take
 * (read-only ones, pseudo file systems, files, an overlay refused): those are bound read-only, or left
 * out when even that fails. So a write anywhere (pip install --user, /etc, the home folder, /tmp) lands
 * in a layer, as in a container, and the layers go with the attempt (trials/controller/process/layers.py).
 *
 * In a user namespace an overlay cannot take / (its submounts are locked: "failed to clone
 * lowerpath"), nor copy up a folder owned by an unmapped user (root: EOVERFLOW). So there the view is
 * the host's tree bound read-only (a tmpfs root with each top-level entry bound in, so /gcs can be
 * added), /dev/shm a private tmpfs, and the folders named by `writable` (the home folder, /tmp,
 * /var/tmp) get their own layer; a write elsewhere fails (EROFS), where the host would have taken it.
 */
static char view_root[4096];  /* NEWROOT once `root` ran: later ops mount under it; init pivots into it */
static int view_read_only;    /* the user namespace's view (above) */
static char layers[4096];     /* LAYERS: <k>/upper and <k>/work per layer */
static int n_layers;

static const char *in_view(const char *path, char *buf, size_t size) {
    if (view_root[0] == '\0') return path;
    int n = snprintf(buf, size, "%s%s", view_root, strcmp(path, "/") == 0 ? "" : path);
    if (n < 0 || (size_t)n >= size) { errno = ENAMETOOLONG; fail("path", path); }
    return buf;
}

/* LOWER's contents copy-on-write at TARGET; the merged root looks as LOWER does (mode, owner). */
static int overlay_at(const char *lower, const char *upper, const char *work, const char *target) {
    struct stat st;
    if (stat(lower, &st) != 0) return -1;
    if (chmod(upper, st.st_mode & 07777) != 0) return -1;
    if (lchown(upper, st.st_uid, st.st_gid) != 0 && errno != EPERM && errno != EINVAL) return -1;
    char opts[12288];
    int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,volatile", lower, upper, work);
    if (n < 0 || (size_t)n >= sizeof opts) { errno = ENAMETOOLONG; return -1; }
    if (!has_volatile()) opts[n - strlen(",volatile")] = '\0';
    if (mount("overlay", target, "overlay", 0, opts) == 0) return 0;
    if (errno != EINVAL || !has_volatile()) return -1;
    opts[n - strlen(",volatile")] = '\0';  /* a kernel without it after all */
    return mount("overlay", target, "overlay", 0, opts);
}

/* A new layer LAYERS/<k> for LOWER, mounted at TARGET. */
static int layer_at(const char *lower, const char *target) {
    char dir[4096], upper[4160], work[4160];
    int n = snprintf(dir, sizeof dir, "%s/%d", layers, n_layers++);
    if (n < 0 || (size_t)n >= sizeof dir) { errno = ENAMETOOLONG; return -1; }
    snprintf(upper, sizeof upper, "%s/upper", dir);
    snprintf(work, sizeof work, "%s/work", dir);
    if (mkdir(dir, 0700) != 0 || mkdir(upper, 0755) != 0 || mkdir(work, 0700) != 0) return -1;
    return overlay_at(lower, upper, work, target);
}

static int under(const char *path, const char *top) {
    size_t n = strlen(top);
    return strncmp(path, top, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

enum { M_HIDDEN, M_TODO, M_LAYER, M_SAME, M_BOUND, M_TREE, M_INSIDE, M_LEFT_OUT };

struct mount_entry {
    int id, parent, major, minor, ro, state;
    char *root, *mp, *type, *opts;
};

static int find_mount(struct mount_entry *m, int n, int id) {
    for (int k = 0; k < n; k++) if (m[k].id == id) return k;
    return -1;
}

/* This namespace's mount table (/proc/self/mountinfo); sets *n. */
static struct mount_entry *read_mounts(int *n) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL) fail("open", "/proc/self/mountinfo");
    struct mount_entry *m = NULL;
    int cap = 0;
    *n = 0;
    char *line = NULL;
    size_t size = 0;
    while (getline(&line, &size, f) > 0) {
        char *field[32];
        int k = 0;
        char *save = NULL;
        for (char *tok = strtok_r(line, " \n", &save); tok != NULL && k < 32; tok = strtok_r(NULL, " \n", &save))
            field[k++] = tok;
        int dash = 6;
        while (dash < k && strcmp(field[dash], "-") != 0) dash++;
        if (dash + 3 > k) continue;
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            m = realloc(m, (size_t)cap * sizeof *m);
            if (m == NULL) fail("malloc", "mountinfo");
        }
        struct mount_entry *e = &m[(*n)++];
        e->id = atoi(field[0]);
        e->parent = atoi(field[1]);
        if (sscanf(field[2], "%d:%d", &e->major, &e->minor) != 2) e->major = e->minor = -1;
        e->root = strdup(field[3]);
        e->mp = strdup(field[4]);
        e->type = strdup(field[dash + 1]);
        e->opts = strdup(field[5]);
        if (!e->root || !e->mp || !e->type || !e->opts) fail("malloc", "mountinfo");
        unescape_octal(e->root);
        unescape_octal(e->mp);
        e->ro = strncmp(field[5], "ro", 2) == 0 && (field[5][2] == '\0' || field[5][2] == ',');
        if (!e->ro) e->ro = strncmp(field[dash + 3], "ro", 2) == 0 && (field[dash + 3][2] == '\0' || field[dash + 3][2] == ',');
        e->state = M_TODO;
    }
    free(line);
    fclose(f);
    return m;
}

static int by_depth(const void *a, const void *b) {
    const struct mount_entry *x = *(struct mount_entry *const *)a, *y = *(struct mount_entry *const *)b;
    size_t lx = strlen(x->mp), ly = strlen(y->mp);
    return lx < ly ? -1 : lx > ly;
}

/* File systems an overlay has no business with: bound read-only instead (another container's root, an
 * overlay, too: nothing a trainer writes to, and each overlay costs a start some 0.1 ms). */
static int pseudo(const char *type) {
    static const char *const names[] = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2",
        "bpf", "tracefs", "debugfs", "securityfs", "pstore", "configfs", "fusectl", "binfmt_misc",
        "efivarfs", "hugetlbfs", "autofs", "nsfs", "rpc_pipefs", "nfsd", "selinuxfs", "overlay"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) if (strcmp(type, names[k]) == 0) return 1;
    return strncmp(type, "fuse", 4) == 0;
}

/* Whether E only shows a folder its parent P shows already (a bind of the same file system). */
static int same_as_parent(const struct mount_entry *e, const struct mount_entry *p) {
    if (e->major != p->major || e->minor != p->minor || e->major < 0) return 0;
    const char *rel = strcmp(p->mp, "/") == 0 ? e->mp : e->mp + strlen(p->mp);
    char want[8192];
    snprintf(want, sizeof want, "%s%s", strcmp(p->root, "/") == 0 ? "" : p->root, rel);
    return strcmp(want, e->root) == 0;
}

static void bind_read_only(struct mount_entry *e, const char *target) {
    struct stat st;
    if (stat(target, &st) != 0 || mount(e->mp, target, NULL, MS_BIND, NULL) != 0) {
        e->state = M_LEFT_OUT;  /* not reachable here (another user's FUSE folder): an empty mount point */
        return;
    }
    e->state = M_BOUND;
    char opts[4096];
    snprintf(opts, sizeof opts, "%s", e->opts);
    mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(opts), NULL);
}

/* As root: the whole host copy-on-write (see above). */
static void layered_root(void) {
    int n;
    struct mount_entry *m = read_mounts(&n);
    for (int k = 0; k < n; k++) {  /* a mount with another on the same point under it is hidden */
        int p = find_mount(m, n, m[k].parent);
        if (p >= 0 && p != k && strcmp(m[p].mp, m[k].mp) == 0) m[p].state = M_HIDDEN;
    }
    int top = -1;
    for (int k = 0; k < n; k++) if (m[k].state == M_TODO && strcmp(m[k].mp, "/") == 0) top = k;
    if (top < 0) { errno = ENOENT; fail("mountinfo", "/"); }
    struct mount_entry **order = malloc((size_t)n * sizeof *order);
    if (order == NULL) fail("malloc", "mountinfo");
    int n_order = 0;
    for (int k = 0; k < n; k++) {
        if (k == top || m[k].state != M_TODO) continue;
        int at = k, hops = 0;  /* shown only when every mount down to / is */
        while (at >= 0 && at != top && m[at].state == M_TODO && hops++ < n) at = find_mount(m, n, m[at].parent);
        if (at == top) order[n_order++] = &m[k];
    }
    qsort(order, (size_t)n_order, sizeof *order, by_depth);  /* a parent before its children */
    if (layer_at("/", view_root) != 0) fail("overlay", "/");
    m[top].state = M_LAYER;
    char buf[8192];
    for (int k = 0; k < n_order; k++) {
        struct mount_entry *e = order[k];
        int pi = find_mount(m, n, e->parent);
        struct mount_entry *p = pi >= 0 ? &m[pi] : NULL;
        if (p == NULL || p->state == M_TREE || p->state == M_INSIDE) { e->state = M_INSIDE; continue; }
        if (p->state == M_LEFT_OUT || under(e->mp, "/proc")) { e->state = M_LEFT_OUT; continue; }
        const char *target = in_view(e->mp, buf, sizeof buf);
        if (strcmp(e->mp, "/dev") == 0 || strcmp(e->mp, "/sys") == 0) {
            if (mount(e->mp, target, NULL, MS_BIND | MS_REC, NULL) != 0) fail("bind", e->mp);
            e->state = M_TREE;
            continue;
        }
        if ((p->state == M_LAYER || p->state == M_SAME) && same_as_parent(e, p)) {
            e->state = M_SAME;
            continue;
        }
        struct stat st;
        if (!e->ro && !pseudo(e->type) && stat(e->mp, &st) == 0 && S_ISDIR(st.st_mode) && layer_at(e->mp, target) == 0) {
            e->state = M_LAYER;
            continue;
        }
        bind_read_only(e, target);
    }
    free(order);
    for (int k = 0; k < n; k++) { free(m[k].root); free(m[k].mp); free(m[k].type); free(m[k].opts); }
    free(m);
}

/* In a user namespace: the host bound read-only in a tmpfs root (see above). */
static void read_only_root(void) {
    if (mount("tmpfs", view_root, "tmpfs", MS_NOSUID, "mode=0755") != 0) fail("tmpfs", view_root);
    DIR *root = opendir("/");
    if (root == NULL) fail("opendir", "/");
    char target[8192], link[4096], source[4096];
    struct dirent *e;
    while ((e = readdir(root)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        snprintf(source, sizeof source, "/%s", e->d_name);
        snprintf(target, sizeof target, "%s/%s", view_root, e->d_name);
        struct stat st;
        if (lstat(source, &st) != 0) continue;
        if (S_ISLNK(st.st_mode)) {
            ssize_t len = readlink(source, link, sizeof link - 1);
            if (len < 0) fail("readlink", source);
            link[len] = '\0';
            if (symlink(link, target) != 0) fail("symlink", target);
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            if (mkdir(target, 0755) != 0) fail("mkdir", target);
        } else {
            int fd = open(target, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
            if (fd < 0) fail("create", target);
            close(fd);
        }
        if (mount(source, target, NULL, MS_BIND | MS_REC, NULL) != 0) fail("bind", source);
    }
    closedir(root);
    int n;
    struct mount_entry *m = read_mounts(&n);
    char proc[8192], sys[8192];
    snprintf(proc, sizeof proc, "%s/proc", view_root);
    snprintf(sys, sizeof sys, "%s/sys", view_root);
    for (int k = 0; k < n; k++) {  /* /proc gets a fresh one, /sys is made read-only later */
        struct mount_entry *me = &m[k];
        if (!under(me->mp, view_root) || strcmp(me->mp, view_root) == 0 || under(me->mp, proc) || under(me->mp, sys))
            continue;
        if (!me->ro && mount(NULL, me->mp, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(me->opts), NULL) != 0 &&
            errno != EACCES)  /* (under a folder this user cannot enter: out of its reach anyway) */
            fail("readonly", me->mp);
    }
    for (int k = 0; k < n; k++) { free(m[k].root); free(m[k].mp); free(m[k].type); free(m[k].opts); }
    free(m);
}

/* Build the view at NEWROOT with its layers in LAYERS (`root NEWROOT LAYERS`). */
static void build_view(const char *newroot, const char *layers_dir, int read_only) {
    if (snprintf(view_root, sizeof view_root, "%s", newroot) >= (int)sizeof view_root ||
        snprintf(layers, sizeof layers, "%s", layers_dir) >= (int)sizeof layers) {
        errno = ENAMETOOLONG;
        fail("root", newroot);
    }
    view_read_only = read_only;
    if (read_only) read_only_root();
    else layered_root();
    /* Left out of every later recursive bind (the trial folder holds NEWROOT): no copy of the view in it. */
    if (mount(NULL, view_root, NULL, MS_UNBINDABLE, NULL) != 0) fail("unbindable", view_root);
    char shm[8192];  /* POSIX shared memory of its own, as a container's */
    struct stat st;
    snprintf(shm, sizeof shm, "%s/dev/shm", view_root);
    if (stat(shm, &st) == 0 && S_ISDIR(st.st_mode) &&
        mount("tmpfs", shm, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") != 0) fail("tmpfs", shm);
}

/* Into the view: the host's root detached (nothing of it reachable but through the view). */
static void enter_view(void) {
    if (chdir(view_root) != 0) fail("chdir", view_root);
    if (syscall(SYS_pivot_root, ".", ".") != 0) fail("pivot_root", view_root);
    if (umount2(".", MNT_DETACH) != 0) fail("umount", "the host's root");
    if (chdir("/") != 0) fail("chdir", "/");
    mount(NULL, "/", NULL, MS_PRIVATE, NULL);  /* (unbindable while it was built) */
    if (view_read_only) mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY, NULL);  /* nobody adds to it */
}

static int open_dir(const char *path) {
    int fd = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) fail("open", path);
    return fd;
}

static int open_sources(int argc, char **argv, int from, int end, int *fds) {
    int n = 0;
    (void)argc;
    for (int k = from; k < end; k++) {
        if ((strcmp(argv[k], "bind") == 0 || strcmp(argv[k], "gcs") == 0) && k + 1 < end) {
            if (n == MAX_FDS) { errno = E2BIG; fail("bind", argv[k + 1]); }
            fds[n++] = open_dir(argv[k + 1]);
        }
    }
    return n;
}

/* Where a child starts. A new process goes where the scheduler finds room at the fork: with the
 * trainers of the other slots busy, that is often a busy CPU, where it waits a slice (2-4 ms) while
 * this one, about to block, goes idle; each of the chain's forks paid it. So a fork pins the parent
 * to its own CPU (the child inherits it), and both take back the original set at once. */
static cpu_set_t home_cpus;
static int home_known = -1;

static void stay_here(void) {
    if (home_known < 0) home_known = sched_getaffinity(0, sizeof home_cpus, &home_cpus) == 0;
    int cpu = sched_getcpu();
    if (!home_known || cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &home_cpus)) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
}

static void roam(void) {
    if (home_known <= 0 || sched_setaffinity(0, sizeof home_cpus, &home_cpus) == 0) return;
    cpu_set_t all;  /* the set changed under us (a cpuset): every CPU it allows */
    memset(&all, 0xff, sizeof all);
    sched_setaffinity(0, sizeof all, &all);
}

static void ignore(int sig) { (void)sig; }

/* Signals whose default action ends a process, aimed by the controller (or a user) at the group. */
static const int group_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGPIPE,
                                    SIGALRM, SIGVTALRM, SIGPROF, SIGXCPU, SIGXFSZ, SIGIO};
#define N_GROUP_SIGNALS (sizeof group_signals / sizeof group_signals[0])

static void set_group_handlers(void (*handler)(int)) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sigemptyset(&sa.sa_mask);
    for (size_t k = 0; k < N_GROUP_SIGNALS; k++) sigaction(group_signals[k], &sa, NULL);
}

/* Exit as the replica did: its code, or its signal (no core file: the replica wrote its own). */
static void exit_like(int status) {
    if (WIFEXITED(status)) _exit(WEXITSTATUS(status));
    int sig = WIFSIGNALED(status) ? WTERMSIG(status) : SIGKILL;
    struct rlimit none = {0, 0};
    setrlimit(RLIMIT_CORE, &none);
    signal(sig, SIG_DFL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, sig);
    sigprocmask(SIG_UNBLOCK, &set, NULL);
    kill(getpid(), sig);
    _exit(128 + sig);
}

/* The replica born in the cgroup of PROCS (returns in it, as 0), or -1: use the cgroup.procs write.
 * The caller (the waiter) never returns. */
static pid_t clone_into_cgroup(const char *procs) {
    char dir[4096];
    const char *slash = strrchr(procs, '/');
    if (slash == NULL || (size_t)(slash - procs) >= sizeof dir) return -1;
    memcpy(dir, procs, (size_t)(slash - procs));
    dir[slash - procs] = '\0';
    int cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg < 0) return -1;
    set_group_handlers(ignore);  /* before the clone: no window where the group's SIGTERM ends us */
    struct shim_clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_INTO_CGROUP;
    args.exit_signal = SIGCHLD;
    args.cgroup = (uint64_t)cg;
    pid_t me = getpid();
    stay_here();
    long child = syscall(SYS_clone3, &args, sizeof args);
    roam();
    if (child < 0) {  /* ENOSYS, E2BIG or EINVAL: an older kernel */
        set_group_handlers(SIG_DFL);
        close(cg);
        return -1;
    }
    if (child == 0) {  /* the replica: dies with the waiter, as the waiter dies with the controller */
        set_group_handlers(SIG_DFL);
        close(cg);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl", "PR_SET_PDEATHSIG");
        if (getppid() != me) _exit(137);
        return 0;
    }
    close(cg);
    if (errfd >= 0) close(errfd);  /* the replica holds the error pipe until it execs */
    for (;;) {
        int status;
        pid_t got = waitpid((pid_t)child, &status, 0);
        if (got == (pid_t)child) exit_like(status);
        if (got < 0 && errno != EINTR) _exit(125);
    }
}


/* Docker's default capability set: what root keeps in a Vertex container (no CAP_SYS_ADMIN, so a
 * root trainer cannot unmount the hidden job folder or its own /proc; no CAP_SYS_PTRACE). */
static const int kept_caps[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FSETID, CAP_FOWNER, CAP_MKNOD,
                                CAP_NET_RAW, CAP_SETGID, CAP_SETUID, CAP_SETFCAP, CAP_SETPCAP,
                                CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT, CAP_KILL, CAP_AUDIT_WRITE};

static void drop_caps(void) {
    uint64_t keep = 0;
    for (size_t k = 0; k < sizeof kept_caps / sizeof kept_caps[0]; k++) keep |= 1ULL << kept_caps[k];
    for (int cap = 0; cap < 64; cap++) {
        if (keep & (1ULL << cap)) continue;
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
            if (errno == EINVAL) break;  /* past the kernel's last capability */
            fail("capabilities", "bounding set");
        }
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);  /* EINVAL before Linux 4.3: none */
    struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
    struct __user_cap_data_struct data[2];
    if (syscall(SYS_capget, &hdr, data) != 0) fail("capabilities", "capget");
    for (int k = 0; k < 2; k++) {
        uint32_t mask = (uint32_t)(keep >> (32 * k));
        data[k].effective &= mask;
        data[k].permitted &= mask;
        data[k].inheritable &= mask;
    }
    if (syscall(SYS_capset, &hdr, data) != 0) fail("capabilities", "capset");
}

/* The ops after `ns`, applied in the new mount namespace; returns the `cd` folder (or NULL). After
 * `root`, the other ops mount in the view (their sources are the host's paths), and the view is
 * entered once they are done. */
static const char *apply_ops(char **argv, int i, int end) {
    int fds[MAX_FDS], nfds = -1;  /* bind sources: opened in the new namespace before any mount */
    int next_fd = 0;
    const char *cwd = NULL;
    char buf[8192];
    while (i < end) {
        const char *op = argv[i];
        if (nfds < 0) nfds = open_sources(end, argv, i, end, fds);
        if (strcmp(op, "root") == 0 && i + 3 < end) {
            build_view(argv[i + 1], argv[i + 2], strcmp(argv[i + 3], "read-only") == 0);
            i += 4;
        } else if (strcmp(op, "writable") == 0 && i + 1 < end) {
            struct stat st;  /* left read-only when it cannot be layered (a submount under it) */
            if (view_read_only && stat(argv[i + 1], &st) == 0 && S_ISDIR(st.st_mode))
                layer_at(argv[i + 1], in_view(argv[i + 1], buf, sizeof buf));
            i += 2;
        } else if (strcmp(op, "overlay") == 0 && i + 3 < end) {
            if (overlay_at(argv[i + 1], argv[i + 2], argv[i + 3], in_view(argv[i + 1], buf, sizeof buf)) != 0)
                fail("overlay", argv[i + 1]);
            i += 4;
        } else if (strcmp(op, "hide") == 0 && i + 1 < end) {
            const char *target = in_view(argv[i + 1], buf, sizeof buf);
            if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") != 0) fail("hide", argv[i + 1]);
            i += 2;
        } else if (strcmp(op, "bind") == 0 && i + 1 < end) {
            int fd = fds[next_fd++];
            bind_fd(fd, in_view(argv[i + 1], buf, sizeof buf));
            close(fd);
            i += 2;
        } else if (strcmp(op, "gcs") == 0 && i + 1 < end && view_root[0] != '\0') {
            int fd = fds[next_fd++];
            bind_fd(fd, in_view("/gcs", buf, sizeof buf));
            close(fd);
            i += 2;
        } else if (strcmp(op, "cd") == 0 && i + 1 < end) {
            cwd = argv[i + 1];
            i += 2;
        } else {
            fprintf(stderr, "trials-shim: unknown or incomplete op %s\n", op);
            _exit(125);
        }
    }
    if (view_root[0] != '\0') enter_view();
    return cwd;
}

/* /sys and every mount under it read-only, as in a Docker container: a root trainer cannot write
 * the host's cgroup files (cgroup.kill of the controller's cgroup or of another trial's) or sysfs. */
static void sys_read_only(void) {
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (f == NULL) fail("open", "/proc/self/mountinfo");
    char line[8192];
    while (fgets(line, sizeof line, f) != NULL) {
        char *save = NULL, *mp = NULL, *opts = NULL;
        int k = 0;
        for (char *tok = strtok_r(line, " ", &save); tok != NULL && k <= 5; tok = strtok_r(NULL, " ", &save), k++) {
            if (k == 4) mp = tok;
            if (k == 5) opts = tok;
        }
        if (mp == NULL || opts == NULL) continue;
        unescape_octal(mp);
        if (strcmp(mp, "/sys") != 0 && strncmp(mp, "/sys/", 5) != 0) continue;
        if (mount(NULL, mp, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | kept_flags(opts), NULL) != 0) fail("readonly", mp);
    }
    fclose(f);
}

/* Docker's read-only paths of /proc: no sysctl, no SysRq (a root trainer could reboot the host). */
static void proc_read_only(const char *path) {
    if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) != 0) {
        if (errno == ENOENT) return;
        fail("bind", path);
    }
    if (mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
        fail("readonly", path);
}

struct exit_note { int status; int others; };  /* init -> waiter: the trainer's wait status */

/* PID 1 of the replica's PID namespace: build the view, mount its own /proc, start the trainer
 * (PID 2), reap every process of the namespace. Signals from outside reach it only for the
 * handlers it has (the waiter's `ignore`), so the group's SIGTERM goes to the trainer alone, and
 * SIGKILL of the group ends init and with it every process of the namespace. */
static void run_init(char **argv, int ops_from, int end, int user, uid_t uid, gid_t gid,
                     int life_fd, int note_fd) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl", "PR_SET_PDEATHSIG");
    struct pollfd life = {life_fd, POLLIN, 0};
    if (poll(&life, 1, 0) != 0) _exit(137);  /* the waiter (so the controller) died before prctl */
    close(life_fd);
    if (user) {
        char map[64];
        write_file("/proc/self/setgroups", "deny");
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
        write_file("/proc/self/uid_map", map);
        snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
        write_file("/proc/self/gid_map", map);
    }
    if (mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0) fail("private", "/");
    const char *cwd = apply_ops(argv, ops_from, end);
    /* Only this namespace's processes: no /proc/<controller>/root, /fd or /environ to reach. */
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) fail("proc", "/proc");
    sys_read_only();
    static const char *const proc_ro[] = {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"};
    for (size_t k = 0; k < sizeof proc_ro / sizeof proc_ro[0]; k++) proc_read_only(proc_ro[k]);
    if (cwd != NULL && chdir(cwd) != 0) fail("chdir", cwd);
    stay_here();
    pid_t trainer = fork();
    roam();
    if (trainer < 0) fail("fork", argv[end + 1]);
    if (trainer == 0) {
        set_group_handlers(SIG_DFL);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl", "PR_SET_PDEATHSIG");
        if (getppid() != 1) _exit(137);
        drop_caps();
#ifdef SHIM_LIBRARY
        close(note_fd);  /* (close-on-exec: what an exec'd trainer would not hold) */
        siglongjmp(trainer_jump, 1);
#endif
        execv(argv[end + 1], argv + end + 1);  /* the controller resolved PATH: no sh fallback */
        report(errno, "exec", argv[end + 1]);
        _exit(127);
    }
    if (errfd >= 0) close(errfd);  /* the trainer holds it until it execs: EOF tells the controller */
    errfd = -1;
    /* The trainer cannot open /proc/1/fd, /proc/1/environ or /proc/1/mem: init keeps capabilities
     * the trainer lacks (ptrace access needs the target's to be a subset of the caller's). Not
     * PR_SET_DUMPABLE 0: an unprivileged controller must still read init's environ (subreaper). */
    for (;;) {
        int status;
        pid_t got = waitpid(-1, &status, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            _exit(0);  /* ECHILD: the namespace is empty */
        }
        if (got != trainer) continue;
        trainer = -1;
        int other;
        pid_t more;
        while ((more = waitpid(-1, &other, WNOHANG)) > 0) {}
        struct exit_note note = {status, more == 0};
        /* Others still run (setsid daemons): outlive the waiter, so the controller finds, names and
         * kills them (cgroup or subreaper) as it did before there was a PID namespace. */
        if (note.others) prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
        if (write(note_fd, &note, sizeof note) != (ssize_t)sizeof note) _exit(125);
        if (!note.others) _exit(0);
        close(note_fd);
    }
}

/* The replica's namespaces' PID 1, born in the cgroup of PROCS when given. Returns its pid in the
 * waiter; never returns in the child. */
static pid_t start_init(const char *procs, int user, char **argv, int ops_from, int end,
                        int *note_r) {
    uid_t uid = getuid();
    gid_t gid = getgid();
    int life[2], note[2];
    if (pipe2(life, O_CLOEXEC) != 0 || pipe2(note, O_CLOEXEC) != 0) fail("pipe", "init");
    uint64_t flags = CLONE_NEWNS | CLONE_NEWPID | (user ? CLONE_NEWUSER : 0);
    int cg = -1;
    if (procs != NULL) {
        char dir[4096];
        const char *slash = strrchr(procs, '/');
        if (slash != NULL && (size_t)(slash - procs) < sizeof dir) {
            memcpy(dir, procs, (size_t)(slash - procs));
            dir[slash - procs] = '\0';
            cg = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        }
    }
    set_group_handlers(ignore);  /* before the clone: no window where the group's SIGTERM ends us */
    struct shim_clone_args args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    long child = -1;
    stay_here();
    if (cg >= 0) {
        args.flags = flags | CLONE_INTO_CGROUP;
        args.cgroup = (uint64_t)cg;
        child = syscall(SYS_clone3, &args, sizeof args);
        if (child < 0 && errno != ENOSYS && errno != E2BIG && errno != EINVAL) fail("clone", "new namespaces");
        args.cgroup = 0;
        close(cg);
    }
    if (child < 0 && procs != NULL) write_file(procs, "0\n");  /* older kernel: join, then clone */
    if (child < 0) {
        args.flags = flags;
        child = syscall(SYS_clone3, &args, sizeof args);
        if (child < 0 && errno == ENOSYS) child = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, 0, 0, 0, 0);
        if (child < 0) fail("clone", "new pid namespace");
    }
    roam();
    if (child == 0) {
        set_group_handlers(ignore);
        close(life[1]);
        close(note[0]);
        run_init(argv, ops_from, end, user, uid, gid, life[0], note[1]);
        _exit(125);
    }
    close(life[0]);  /* life[1] stays open in the waiter until it exits */
    close(note[1]);
    *note_r = note[0];
    return (pid_t)child;
}

/* The waiter: exits as the trainer did (init tells it), or as init did when init died first. */
static void wait_for_init(pid_t child, int note_fd) {
    if (errfd >= 0) close(errfd);
    errfd = -1;
    struct exit_note note;
    size_t got = 0;
    while (got < sizeof note) {
        ssize_t n = read(note_fd, (char *)&note + got, sizeof note - got);
        if (n > 0) got += (size_t)n;
        else if (n < 0 && errno == EINTR) continue;
        else break;
    }
    if (got == sizeof note && note.others) exit_like(note.status);
    int status;
    for (;;) {
        pid_t r = waitpid(child, &status, 0);
        if (r == child) break;
        if (r < 0 && errno != EINTR) _exit(125);
    }
    exit_like(got == sizeof note ? note.status : status);
}

int main(int argc, char **argv) {
    if (argc < 5) { fprintf(stderr, "usage: trials-shim PPID CGROUP_PROCS ERRFD [OP ...] -- PROGRAM [ARG ...]\n"); return 125; }
    if (strcmp(argv[3], "-") != 0) {
        errfd = atoi(argv[3]);
        fcntl(errfd, F_SETFD, FD_CLOEXEC);
    }
    pid_t parent = (pid_t)atol(argv[1]);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fail("prctl", "PR_SET_PDEATHSIG");
    if (parent > 0 && getppid() != parent) _exit(137);  /* the controller died before prctl */
    int end = 4;
    while (end < argc && strcmp(argv[end], "--") != 0) end++;
    if (end + 1 >= argc) { fprintf(stderr, "trials-shim: no program after --\n"); return 125; }
    const char *procs = strcmp(argv[2], "-") != 0 ? argv[2] : NULL;
    if (end > 4 && strcmp(argv[4], "ns") == 0) {
        if (end < 6) { fprintf(stderr, "trials-shim: unknown or incomplete op ns\n"); return 125; }
        int note_fd;
        pid_t init = start_init(procs, strcmp(argv[5], "user") == 0, argv, 6, end, &note_fd);
        wait_for_init(init, note_fd);
    }
    if (procs != NULL && clone_into_cgroup(procs) != 0) {
        write_file(procs, "0\n");  /* this process and all it starts */
    }
    const char *cwd = apply_ops(argv, 4, end);
    if (cwd != NULL && chdir(cwd) != 0) fail("chdir", cwd);
#ifdef SHIM_LIBRARY
    return 0;
#endif
    execv(argv[end + 1], argv + end + 1);  /* the controller resolved PATH: no sh fallback */
    report(errno, "exec", argv[end + 1]);
    return 127;
}

#ifdef SHIM_LIBRARY
/* main() in a warm launcher's child: returns 0 in the process that is to run the trainer, else the
 * setup's exit code; the waiter and init never return (they exit as the trainer did). */
int trials_shim_enter(int argc, char **argv) {
    if (sigsetjmp(trainer_jump, 0) != 0) return 0;
    return shim_main(argc, argv);
}
#endif
