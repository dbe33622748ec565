# The gpuwise exporter image: Python, gpuwise without torch, run as an unprivileged user.
# Build from the repository root:
#   docker build -f deploy/docker/exporter.Dockerfile -t gpuwise-exporter:0.1.0 .
# gpuwise[exporter-k8s] adds grpcio for the kubelet's pod-resources API (overlays/pod-resources).
# CMD fetches nothing by itself; the DaemonSet adds `--node-info auto` (node labels, metadata).
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container runtime injects it
# (NVIDIA_VISIBLE_DEVICES=all), or on GKE the DaemonSet mounts the host's driver folder.
FROM python:3.11-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
RUN python -m venv /usr/local/gpuwise \
    && /usr/local/gpuwise/bin/pip install --no-cache-dir --upgrade "pip>=24" \
    && /usr/local/gpuwise/bin/pip install --no-cache-dir ".[exporter-k8s]"

FROM python:3.11-slim-bookworm
COPY --from=build /usr/local/gpuwise /usr/local/gpuwise
# With the privileged overlay (hostPID) the exporter reads other users' /proc/<pid>/status and
# cgroup, which any user may; command lines stay out of labels unless --process-command is given.
RUN useradd --system --uid 10001 --no-create-home --shell /usr/sbin/nologin gpuwise
USER 10001
ENV PATH=/usr/local/gpuwise/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    GPUWISE_HOME=/tmp/gpuwise
EXPOSE 9835
ENTRYPOINT ["gpuwise"]
CMD ["exporter", "--host", "0.0.0.0", "--port", "9835", "--interval", "1s"]
