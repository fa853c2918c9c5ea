"""Before a containerised job starts (and before its folder is made): the runtime can start
containers here and every image the job's pools name exists locally (never pulled or built
implicitly). Each problem is one line naming the fix."""

from __future__ import annotations

from collections.abc import Mapping

from trials.controller.container.runtime import Runtime, RuntimeUnavailable
from trials.spec import JobSpec


def pool_images(job: JobSpec) -> list[str]:
    """The images the job's pools run, in pool order, each once."""
    out: list[str] = []
    for pool in job.trial_job.worker_pools if job.trial_job else ():
        if pool is None:
            continue
        image = pool.container.image_uri if pool.container else (
            pool.python_package.executor_image_uri if pool.python_package else None)
        if image and image not in out:
            out.append(image)
    return out


def check_images(runtime: Runtime, job: JobSpec, images: Mapping[str, str]) -> list[str]:
    """The local images the job runs (after ``--image URI=LOCAL``); raises RuntimeUnavailable for the
    first one missing, or when the runtime cannot start a container of the first."""
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
