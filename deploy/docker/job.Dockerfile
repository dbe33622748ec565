# The image a `gpuwise plan --export k8s` Job runs: PyTorch + CUDA, gpuwise[train], and your code.
#
#   docker build -f deploy/docker/job.Dockerfile -t gpuwise-job:0.1.0 .          # from your project's folder
#   gpuwise plan ... --export k8s --image REGISTRY/gpuwise-job:0.1.0
#
# Build args: GPUWISE_PIP_SPEC (pip install arguments for gpuwise; default the pinned release, e.g.
# "--no-deps /src/gpuwise" to install a checkout copied into the build context) and BASE (the PyTorch
# image). Your project's requirements.txt is installed when present. The job runs as a non-root user.
ARG BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${BASE}

ARG GPUWISE_PIP_SPEC="gpuwise[train]==0.1.0"
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 GPUWISE_CHECKPOINT_DIR=/checkpoints

WORKDIR /workspace
COPY . /workspace
# GPUWISE_PIP_SPEC pins gpuwise by default (a build arg hadolint cannot see through)
# hadolint ignore=DL3013
RUN python -m pip install ${GPUWISE_PIP_SPEC} \
    && if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi \
    && useradd --create-home --uid 1000 trainer \
    && mkdir -p /checkpoints && chown trainer /checkpoints /workspace \
    && gpuwise --help > /dev/null

USER 1000
# The export sets the command: gpuwise run --nproc-per-node N -- python SCRIPT (gpuwise run adds torchrun).
CMD ["gpuwise", "run", "--help"]
