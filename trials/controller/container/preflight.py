"""Before a containerised job starts (and before its folder is made): every image the job's pools name
is an image reference (checked before any runtime is asked), exists locally (never pulled or built
implicitly), and the runtime can start containers here. Each problem is one line naming the fix."""

from __future__ import annotations

from collections.abc import Mapping

from trials.controller.container.reference import check_reference
from trials.controller.container.runtime import Runtime, RuntimeUnavailable
from trials.spec import JobSpec


def pool_images(job: JobSpec) -> list[str]:
    """The images the job's pools run, in pool order, each once."""
    out: list[str] = []
    for _where, image in pool_image_fields(job):
        if image not in out:
            out.append(image)
    return out


def pool_image_fields(job: JobSpec) -> list[tuple[str, str]]:
    """Each pool's image with the field that names it (``trialJobSpec.workerPoolSpecs[1].containerSpec.imageUri``)."""
    out: list[tuple[str, str]] = []
    for i, pool in enumerate(job.trial_job.worker_pools if job.trial_job else ()):
        if pool is None:
            continue
        field, image = ("containerSpec.imageUri", pool.container.image_uri) if pool.container else (
            ("pythonPackageSpec.executorImageUri", pool.python_package.executor_image_uri) if pool.python_package
            else ("", None))
        if image:
            out.append((f"trialJobSpec.workerPoolSpecs[{i}].{field}", image))
    return out


def check_references(job: JobSpec, images: Mapping[str, str]) -> None:
    """Every pool's image, and every ``--image`` stand-in, is an image reference (pure: no runtime is asked).

    Raises:
        ConfigError: one line naming the pool's field (or ``--image``), the expected form and what it got.
    """
    for where, image in pool_image_fields(job):
        check_reference(image, where)
    for uri, local in images.items():
        check_reference(local, f"--image {uri}=LOCAL")


def check_images(runtime: Runtime, job: JobSpec, images: Mapping[str, str]) -> list[str]:
    """The local images the job runs (after ``--image URI=LOCAL``); raises RuntimeUnavailable for the
    first one missing, or when the runtime cannot start a container of the first; a ConfigError for an
    image that is no image reference, before the runtime is asked anything."""
    check_references(job, images)
    wanted = pool_images(job)
    if not wanted:
        raise RuntimeUnavailable(f"--runtime {runtime.name}: the spec has no trialJobSpec with an image "
                                 f"(containerSpec.imageUri or pythonPackageSpec.executorImageUri) to run")
    unknown = sorted(set(images) - set(wanted))
    if unknown:
        raise RuntimeUnavailable(f"--image {unknown[0]}=…: the spec's pools name no such image "
                                 f"(they name {', '.join(wanted)})")
    local = []
    for uri in wanted:
        image = images.get(uri, uri)
        if not runtime.image_exists(image):
            hint = (f"build it (`{runtime.name} build -t {image} .`) or pull it (`{runtime.name} pull {image}`)"
                    if image != uri else f"build or pull {image}")
            mapped = "" if image != uri else f", or run a local image in its place with --image {uri}=LOCAL"
            raise RuntimeUnavailable(f"--runtime {runtime.name}: image {image} is not among {runtime.name}'s local "
                                     f"images: {hint}{mapped}")
        local.append(image)
    runtime.check_starts(local[0])
    return local
