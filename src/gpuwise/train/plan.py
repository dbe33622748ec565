"""The plan a job runs, read inside the job: :func:`plan_recipe` and :func:`job_plan`.

``gpuwise run --plan plan.json`` (and every exported job) sets ``GPUWISE_PLAN`` to the plan file
for each worker; a training script reads the recipe it should run with::

    from gpuwise.train import plan_recipe

    recipe = plan_recipe()        # None outside a planned job
    if recipe is not None:
        micro_batch, accumulation = recipe.micro_batch, recipe.accumulation

The types are :mod:`gpuwise.base.recipe`'s: this module imports no planner code, so a malformed
planner configuration cannot stop training (ARCHITECTURE.md). Pure standard library.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuwise.base import settings
from gpuwise.base.recipe import PlanFile, Recipe, load_plan_file


def job_plan(environ: Mapping[str, str] | None = None) -> PlanFile | None:
    """The plan file named by ``GPUWISE_PLAN`` (None when unset); InputError when unreadable."""
    path = settings.path("GPUWISE_PLAN", environ)
    return None if path is None else load_plan_file(path)


def plan_recipe(environ: Mapping[str, str] | None = None) -> Recipe | None:
    """The recipe of the plan this job runs (None outside a planned job)."""
    plan = job_plan(environ)
    return None if plan is None else plan.recipe
