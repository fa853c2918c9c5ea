"""A ``sitecustomize`` that `trials check` puts on a trainer's PYTHONPATH to see it read an AIP_*
output variable that is not set (the job has no base output directory) or reach for the host's cloud
identity: a project taken from the environment or gcloud's configuration, the metadata
server. Reads made by Google's libraries while they probe (``google.auth.default`` always looks at
``GOOGLE_CLOUD_PROJECT``) do not count, except when a client was built without a project.
"""

from __future__ import annotations

AUDIT_ENV = "TRIALS_CHECK_AUDIT"  # the file the audit appends to, one finding per line

SITECUSTOMIZE = r'''
"""Written by `trials check`: notes where the trainer reads the host's cloud identity."""
import os
import sys


def _install():
    log = os.environ.get("TRIALS_CHECK_AUDIT")
    if not log:
        return
    outputs = ("AIP_MODEL_DIR", "AIP_CHECKPOINT_DIR", "AIP_TENSORBOARD_LOG_DIR")
    prefixes = outputs + ("GOOGLE_CLOUD_PROJECT", "GCLOUD_PROJECT", "CLOUDSDK_CORE_PROJECT",
                          "GOOGLE_CLOUD_QUOTA_PROJECT", "CLOUDSDK_CONFIG", "GOOGLE_APPLICATION_CREDENTIALS")
    seen = set()
    here = os.path.dirname(os.path.abspath(__file__))
    library_roots = tuple({os.path.dirname(os.__file__)} | {p for p in sys.path if "-packages" in p})

    def note(what):
        if what in seen:
            return
        seen.add(what)
        try:
            with open(log, "a", encoding="utf-8") as f:
                f.write(what + "\n")
        except OSError:
            pass

    def from_user_code():
        """(a Google client is guessing its project, the read was made by the trainer's own code)"""
        try:
            frame = sys._getframe(2)
        except ValueError:  # the interpreter opening the script: no Python frame asked
            frame = None
        implicit = False
        direct = None
        while frame is not None:
            name = frame.f_code.co_filename
            if frame.f_code.co_name == "_determine_default":  # google.cloud.client: no project given
                implicit = True
            if direct is None and not name.startswith(here) and not name.startswith("<frozen") \
                    and os.path.basename(name) not in ("os.py", "_collections_abc.py", "socket.py", "subprocess.py"):
                direct = not name.startswith(library_roots)  # the frame that asked for the variable
            frame = frame.f_back
        return implicit, bool(direct)

    def is_set(key):
        try:
            base.__getitem__(os.environ, key)  # os._Environ's own lookup: no audited call again
        except KeyError:
            return False
        return True

    def watch(key, soft=False):
        if not isinstance(key, str) or not key.startswith(prefixes):
            return
        implicit, direct = from_user_code()
        if key in outputs:  # set only with a base output directory: a read of an unset one is noted,
            # "soft" when the trainer can do without it (.get, getenv, `in`), else it raises KeyError
            if direct and not is_set(key):
                note(("unset-soft $" if soft else "unset $") + key)
        elif implicit:
            note("an implicit project (a Google Cloud client built without project=)")
        elif direct and key != "GOOGLE_APPLICATION_CREDENTIALS":
            note("$" + key)

    base = type(os.environ)

    class Audited(base):
        def __getitem__(self, key):
            caller = sys._getframe(1).f_code
            watch(key, soft=caller.co_name == "get" and ("collections_abc" in caller.co_filename
                                                         or caller.co_filename.endswith(("os.py", "<frozen os>"))))
            return base.__getitem__(self, key)

        def __contains__(self, key):
            watch(key, soft=True)
            return base.__contains__(self, key)

    try:
        os.environ.__class__ = Audited
    except TypeError:
        pass

    def hook(event, args):
        try:
            audit(event, args)
        except Exception:  # an audit hook that raises would make the trainer's own call fail
            pass

    def audit(event, args):
        if event not in ("open", "socket.getaddrinfo", "socket.connect", "subprocess.Popen"):
            return
        implicit, direct = from_user_code()
        if implicit:
            note("an implicit project (a Google Cloud client built without project=)")
        if not direct:  # Application Default Credentials probing on their own: what Vertex expects
            return
        if event == "open" and args and isinstance(args[0], str):
            path = args[0]
            if "/.config/gcloud/" in path and not path.endswith("application_default_credentials.json"):
                note("gcloud's configuration (" + path.split("/.config/gcloud/", 1)[1] + ")")
        elif event == "socket.getaddrinfo" and args and args[0] in ("metadata.google.internal", "metadata"):
            note("the metadata server")
        elif event == "socket.connect" and len(args) > 1 and isinstance(args[1], tuple) \
                and args[1] and args[1][0] == "169.254.169.254":
            note("the metadata server")
        elif event == "subprocess.Popen" and len(args) > 1 and args[1] and "gcloud" in str(args[1][0]):
            note("the gcloud command")

    sys.addaudithook(hook)

    # A sitecustomize of the trainer's own environment still runs.
    import importlib.machinery
    import importlib.util

    others = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_install()
del _install
'''
