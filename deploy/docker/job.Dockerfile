# The image a `gpuwise plan --export k8s` Job runs: PyTorch + CUDA, gpuwise[train], your code, and
# (by default) the EFA libraries NCCL needs to use AWS's fabric.
#
#   gpuwise plan ... --export k8s --workdir .   # writes .gpuwise-dist/gpuwise-VERSION-py3-none-any.whl
#   docker build -f deploy/docker/job.Dockerfile -t REGISTRY/gpuwise-job:0.1.0 .   # from your project
#   gpuwise plan ... --export k8s --image REGISTRY/gpuwise-job:0.1.0
#
# gpuwise is installed from the wheel the export wrote into the build context (.gpuwise-dist/, the
# exact code that made the plan), or from GPUWISE_PIP_SPEC when given (pip install arguments, e.g.
# "--no-deps /workspace/gpuwise-checkout" or a version that exists on your index) — never from a
# release pin that may not exist. Your project's requirements.txt is installed when present.
#
# WITH_EFA=1 (default) runs AWS's EFA installer in container mode (no kernel module): libfabric and
# the aws-ofi-nccl plugin, without which NCCL on p4d/p5/p6/g6e falls back to TCP sockets (AWS,
# "Get started with EFA and NCCL", docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html).
# Set WITH_EFA=0 for GKE/AKS images. EFA_INSTALLER names the tarball (pin a version for repeatable
# builds). The job runs as the non-root user 1000; the manifests set fsGroup 1000 so it can write
# the checkpoint volume.
ARG BASE=pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
FROM ${BASE}

ARG GPUWISE_PIP_SPEC=""
ARG WITH_EFA=1
ARG EFA_INSTALLER=aws-efa-installer-latest.tar.gz
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 GPUWISE_CHECKPOINT_DIR=/checkpoints

# hadolint ignore=DL3008
RUN if [ "${WITH_EFA}" = "1" ]; then \
      apt-get update && apt-get install -y --no-install-recommends curl ca-certificates \
      && curl -fsSL --retry 3 --max-time 300 -o /tmp/efa.tar.gz "https://efa-installer.amazonaws.com/${EFA_INSTALLER}" \
      && tar -xzf /tmp/efa.tar.gz -C /tmp \
      && cd /tmp/aws-efa-installer && ./efa_installer.sh -y --skip-kmod --skip-limit-conf --no-verify \
      && cd / && rm -rf /tmp/efa.tar.gz /tmp/aws-efa-installer /var/lib/apt/lists/*; \
    fi
ENV LD_LIBRARY_PATH=/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:/opt/amazon/ofi-nccl/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH}

WORKDIR /workspace
COPY . /workspace
# gpuwise: GPUWISE_PIP_SPEC, else the export's wheel (a build arg hadolint cannot see through)
# hadolint ignore=DL3013
RUN if [ -n "${GPUWISE_PIP_SPEC}" ]; then python -m pip install ${GPUWISE_PIP_SPEC}; \
    elif ls .gpuwise-dist/gpuwise-*.whl > /dev/null 2>&1; then \
      python -m pip install "$(ls .gpuwise-dist/gpuwise-*.whl | head -n 1)[train]"; \
    else echo "error: no gpuwise to install — To fix: run gpuwise plan --export k8s --workdir . in the build context first, or pass --build-arg GPUWISE_PIP_SPEC=..." >&2; exit 2; fi \
    && if [ -f requirements.txt ]; then python -m pip install -r requirements.txt; fi \
    && useradd --create-home --uid 1000 trainer \
    && mkdir -p /checkpoints && chown trainer /checkpoints /workspace \
    && gpuwise --help > /dev/null

USER 1000
# The export sets the command: gpuwise run --nproc-per-node N -- python SCRIPT (gpuwise run adds torchrun).
CMD ["gpuwise", "run", "--help"]
