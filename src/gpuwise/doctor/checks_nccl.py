"""NCCL checks: version and NCCL_* variables, NCCL_SOCKET_IFNAME against the interfaces,
InfiniBand devices and their ports.

NCCL's "unhandled system error" and "Bootstrap : no socket interface found" mostly come from
these: a socket interface name that matches nothing, IB disabled or pointed at a missing HCA.
Variable names and meanings: NCCL environment variables,
https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
"""

from __future__ import annotations

from gpuwise.doctor.context import Context
from gpuwise.doctor.result import CheckResult, fail, ok, skip, warn
from gpuwise.errors import did_you_mean

# Documented NCCL variables (NCCL user guide, "Environment Variables"), to catch misspellings.
KNOWN_NCCL_VARS = (
    "NCCL_SOCKET_IFNAME",
    "NCCL_SOCKET_FAMILY",
    "NCCL_SOCKET_NTHREADS",
    "NCCL_NSOCKS_PERTHREAD",
    "NCCL_CROSS_NIC",
    "NCCL_IB_HCA",
    "NCCL_IB_TIMEOUT",
    "NCCL_IB_RETRY_CNT",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_ADDR_FAMILY",
    "NCCL_IB_ADDR_RANGE",
    "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_SL",
    "NCCL_IB_TC",
    "NCCL_IB_RETURN_ASYNC_EVENTS",
    "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_ADAPTIVE_ROUTING",
    "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_PCI_RELAXED_ORDERING",
    "NCCL_IB_DISABLE",
    "NCCL_IB_MERGE_NICS",
    "NCCL_IB_USE_INLINE",
    "NCCL_IB_ECE_ENABLE",
    "NCCL_OOB_NET_ENABLE",
    "NCCL_OOB_NET_IFNAME",
    "NCCL_UID_STAGGER_THRESHOLD",
    "NCCL_UID_STAGGER_RATE",
    "NCCL_NET",
    "NCCL_NET_PLUGIN",
    "NCCL_TUNER_PLUGIN",
    "NCCL_PROFILER_PLUGIN",
    "NCCL_IGNORE_CPU_AFFINITY",
    "NCCL_DEBUG",
    "NCCL_DEBUG_FILE",
    "NCCL_DEBUG_SUBSYS",
    "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD",
    "NCCL_CONF_FILE",
    "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE",
    "NCCL_SET_THREAD_NAME",
    "NCCL_P2P_DISABLE",
    "NCCL_P2P_LEVEL",
    "NCCL_P2P_DIRECT_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_BUFFSIZE",
    "NCCL_NTHREADS",
    "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS",
    "NCCL_CHECKS_DISABLE",
    "NCCL_CHECK_POINTERS",
    "NCCL_LAUNCH_MODE",
    "NCCL_IB_CUDA_SUPPORT",
    "NCCL_NET_GDR_LEVEL",
    "NCCL_NET_GDR_READ",
    "NCCL_NET_SHARED_BUFFERS",
    "NCCL_NET_SHARED_COMMS",
    "NCCL_SINGLE_RING_THRESHOLD",
    "NCCL_LL_THRESHOLD",
    "NCCL_TREE_THRESHOLD",
    "NCCL_ALGO",
    "NCCL_PROTO",
    "NCCL_NVB_DISABLE",
    "NCCL_PXN_DISABLE",
    "NCCL_P2P_PXN_LEVEL",
    "NCCL_RUNTIME_CONNECT",
    "NCCL_GRAPH_REGISTER",
    "NCCL_LOCAL_REGISTER",
    "NCCL_LEGACY_CUDA_REGISTER",
    "NCCL_SET_STACK_SIZE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "NCCL_DMABUF_ENABLE",
    "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE",
    "NCCL_P2P_LL_THRESHOLD",
    "NCCL_ALLOC_P2P_NET_LL_BUFFERS",
    "NCCL_COMM_BLOCKING",
    "NCCL_CGA_CLUSTER_SIZE",
    "NCCL_MAX_CTAS",
    "NCCL_MIN_CTAS",
    "NCCL_NVLS_ENABLE",
    "NCCL_NVLS_CHUNKSIZE",
    "NCCL_IB_MQP_RETRY_ALL",
    "NCCL_IB_MQP_RETRY_CNT",
    "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
    "NCCL_NET_OVERHEAD",
    "NCCL_WORK_FIFO_DEPTH",
    "NCCL_CUMEM_ENABLE",
    "NCCL_CUMEM_HOST_ENABLE",
    "NCCL_ASYNC_ERROR_HANDLING",
    "NCCL_BLOCKING_WAIT",
    "NCCL_SHM_USE_CUDA_MEMCPY",
    "NCCL_SHM_MEMCPY_MODE",
    "NCCL_CTA_POLICY",
    "NCCL_IB_FIFO_TC",
    "NCCL_NCHANNELS_PER_NET_PEER",
    "NCCL_NVLS_TREE_ENABLE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_RAS_ENABLE",
    "NCCL_DEBUG_TIMESTAMP_FORMAT",
    "NCCL_DEBUG_TIMESTAMP_LEVELS",
    "NCCL_WIN_ENABLE",
    "NCCL_IB_DATA_DIRECT",
)
_TRUE = ("1", "true", "yes", "on")


def check_nccl(ctx: Context) -> CheckResult:
    """NCCL version (from torch) and the NCCL_* variables: misspelled names, switches that slow it down."""
    name = "nccl"
    nccl_vars = {k: v for k, v in ctx.env.items() if k.startswith("NCCL_")}
    shown = ", ".join(f"{k}={v}" for k, v in sorted(nccl_vars.items())) or "no NCCL_* variables set"
    torch = ctx.torch
    version = (
        f"NCCL {torch.nccl_version}"
        if torch.nccl_version
        else "NCCL not available (torch not installed or built without CUDA)"
    )
    unknown = [k for k in nccl_vars if k not in KNOWN_NCCL_VARS]
    if unknown:
        hints = {k: did_you_mean(k, KNOWN_NCCL_VARS, 1) for k in unknown}
        named = "; ".join(
            f"{k}" + (f" (did you mean {h[0]}?)" if h else "") for k, h in hints.items()
        )
        return warn(
            name,
            f"{version}; unknown NCCL variable(s), which NCCL ignores: {named}",
            "rename them to the documented names (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html)",
        )
    slow = []
    if nccl_vars.get("NCCL_P2P_DISABLE", "").lower() in _TRUE:
        slow.append("NCCL_P2P_DISABLE=1 (GPU-to-GPU traffic goes through host memory)")
    if nccl_vars.get("NCCL_SHM_DISABLE", "").lower() in _TRUE:
        slow.append("NCCL_SHM_DISABLE=1")
    if nccl_vars.get("NCCL_IB_DISABLE", "").lower() in _TRUE and ctx.probe.list_dir(
        "/sys/class/infiniband"
    ):
        slow.append(
            "NCCL_IB_DISABLE=1 although InfiniBand/RoCE devices are present (NCCL falls back to TCP)"
        )
    if slow:
        return warn(
            name,
            f"{version}; {shown}: " + "; ".join(slow),
            "unset these unless a known bug needs them: `unset "
            + " ".join(s.split("=")[0] for s in slow)
            + "`",
        )
    if not torch.nccl_version and len(ctx.gpus.devices) > 1:
        return warn(
            name,
            f"{version}, on a machine with {len(ctx.gpus.devices)} GPUs: multi-GPU training "
            "cannot use NCCL",
            "install a CUDA build of torch (it bundles NCCL)",
        )
    if not torch.nccl_version and not nccl_vars:
        return skip(name, f"{version}; {shown}")
    return ok(name, f"{version}; {shown}")


def _interfaces(ctx: Context) -> dict[str, str]:
    """Interface name → operstate (up/down/unknown) from /sys/class/net."""
    out = {}
    for ifname in ctx.probe.list_dir("/sys/class/net") or []:
        state = (ctx.probe.read_text(f"/sys/class/net/{ifname}/operstate") or "unknown").strip()
        out[ifname] = state
    return out


def match_ifname(spec: str, names: list[str]) -> list[str]:
    """The interfaces NCCL_SOCKET_IFNAME selects: comma-separated prefixes; ``^`` excludes; ``=`` exact."""
    exclude = spec.startswith("^")
    body = spec[1:] if exclude else spec
    exact = body.startswith("=")
    body = body[1:] if exact else body
    parts = [p.strip() for p in body.split(",") if p.strip()]

    def hit(n: str) -> bool:
        return any(n == p if exact else n.startswith(p) for p in parts)

    return [n for n in names if hit(n) != exclude]


def check_socket_ifname(ctx: Context) -> CheckResult:
    """NCCL_SOCKET_IFNAME names interfaces that exist and are up (else NCCL's bootstrap fails)."""
    name = "nccl-socket-ifname"
    ifaces = _interfaces(ctx)
    if not ifaces:
        return skip(name, "cannot list network interfaces (/sys/class/net unreadable)")
    listed = ", ".join(f"{n} ({s})" for n, s in ifaces.items())
    spec = ctx.env.get("NCCL_SOCKET_IFNAME")
    if spec is None:
        usable = [
            n for n, s in ifaces.items() if n != "lo" and not n.startswith("docker") and s != "down"
        ]
        if not usable:
            return warn(
                name,
                f"NCCL_SOCKET_IFNAME is unset and only loopback/docker or down interfaces exist "
                f"({listed}): multi-node NCCL has no interface to use",
                "bring a network interface up, or set NCCL_SOCKET_IFNAME to the one to use",
            )
        return ok(
            name,
            f"NCCL_SOCKET_IFNAME is unset: NCCL picks an interface itself (ib* first, never lo or "
            f"docker*) from {listed}",
        )
    chosen = match_ifname(spec, list(ifaces))
    if not chosen:
        return fail(
            name,
            f'NCCL_SOCKET_IFNAME={spec!r} matches none of {listed}: NCCL will fail with "Bootstrap : '
            'no socket interface found" / "unhandled system error"',
            f"set NCCL_SOCKET_IFNAME to one of {', '.join(n for n in ifaces if n != 'lo')} (a prefix such as "
            "`eth` works; `=eth0` matches exactly, `^docker,lo` excludes)",
        )
    up = [n for n in chosen if ifaces[n] in ("up", "unknown")]
    if not up:
        return fail(
            name,
            f"NCCL_SOCKET_IFNAME={spec!r} selects {', '.join(chosen)}, all down",
            "bring the interface up or pick another: " + listed,
        )
    if all(n == "lo" for n in up):
        return warn(
            name,
            f"NCCL_SOCKET_IFNAME={spec!r} selects only loopback: fine on one node, but other nodes "
            "cannot reach it",
            "use the node's network interface for multi-node runs",
        )
    return ok(
        name,
        f"NCCL_SOCKET_IFNAME={spec!r} selects {', '.join(f'{n} ({ifaces[n]})' for n in chosen)}",
    )


def check_infiniband(ctx: Context) -> CheckResult:
    """InfiniBand / RoCE devices under /sys/class/infiniband, their port state, and NCCL_IB_HCA."""
    name = "infiniband"
    devices = ctx.probe.list_dir("/sys/class/infiniband") or []
    hca = ctx.env.get("NCCL_IB_HCA")
    if not devices:
        if hca:
            return fail(
                name,
                f"NCCL_IB_HCA={hca!r} but no InfiniBand/RoCE device exists (/sys/class/infiniband is "
                "empty or missing)",
                "unset NCCL_IB_HCA, or load the RDMA drivers (mlx5_ib) / pass "
                "/dev/infiniband into the container",
            )
        return ok(
            name,
            "no InfiniBand/RoCE devices: multi-node NCCL traffic uses TCP sockets (slower; fine on one node)",
        )
    ports: list[str] = []
    active = []
    for dev in devices:
        for port in ctx.probe.list_dir(f"/sys/class/infiniband/{dev}/ports") or []:
            base = f"/sys/class/infiniband/{dev}/ports/{port}"
            state = (ctx.probe.read_text(f"{base}/state") or "?").strip()
            layer = (ctx.probe.read_text(f"{base}/link_layer") or "?").strip()
            rate = (ctx.probe.read_text(f"{base}/rate") or "?").strip()
            ports.append(f"{dev}:{port} {state} {layer} {rate}")
            if "ACTIVE" in state.upper():
                active.append(dev)
    if hca:
        wanted = [p.strip().lstrip("^=").split(":")[0] for p in hca.split(",") if p.strip()]
        missing = [w for w in wanted if not any(d.startswith(w) for d in devices)]
        if missing and not hca.startswith("^"):
            return fail(
                name,
                f"NCCL_IB_HCA={hca!r} names {', '.join(missing)}, which does not exist; devices: "
                + ", ".join(devices),
                f"set NCCL_IB_HCA to existing devices, e.g. {devices[0]}",
            )
    if not active:
        return warn(
            name,
            "InfiniBand/RoCE devices present but no port is ACTIVE: "
            + ("; ".join(ports) or ", ".join(devices)),
            "check the cable/switch and the subnet manager (`ibstat`); for RoCE, the Ethernet link",
        )
    return ok(name, f"{len(devices)} InfiniBand/RoCE device(s): " + "; ".join(ports))
