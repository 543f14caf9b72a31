"""Scale benchmark: how hookbus's costs grow with agents, kernels x modules and chain length.

    python bench/bench_scale.py [--quick] [--only agents,registry,chains,hooks,journal,fleet,cluster] [--seconds 8]

Each curve is a table whose first row is 1.0: per-unit costs (server CPU per
event, registry messages per kernel and module, latency over a raw request)
divided by the first row's, so a column that stays near 1.0 grows with the
work and one that climbs grows faster than it. Each curve ends with a line
saying whether it is linear (the last row's per-unit cost within 2x of the
first's). Figures move with the machine's load: compare within one run.

- agents: 1 .. 1,000 ``Bus`` connections spread over up to four processes,
  each emitting a steady rate, one queue group receiving: delivered / emitted,
  p99 emit->deliver latency, RSS per connection, nats-server CPU.
- registry: kernels (a ``Bus`` each, their middleware views started) x modules
  (heartbeat 1 s) idle: registry messages per second at the server, CPU of the
  kernels' and the modules' processes and of the server; the time for every
  kernel to see a new module appear, be approved (by one operator) and die;
  then a smaller grid again under load (every kernel intercepting 2 calls/s).
- chains: 1, 5, 20 handlers in one module and spread over as many modules:
  intercept p50/p99 over one raw nats-py request/reply.
- decisions: decisions/s per kernel (and per module process) for one module,
  a five-handler module, five modules, one rule and 100 rules in the kernel,
  50 in flight, over raw request/reply to an echo in the same run
  (``bench/scale_decisions.py``).
- hooks, journal, fleet: hooks.json size against memory and dispatch cost,
  the journal sink's store rate against the offered rate, fleet-metrics
  series and scrape time against sessions (``bench/scale_curves.py``).
- cluster: the agents curve again on the 3-node cluster of
  ``deploy/nats/cluster-node-*.conf`` (run on loopback, hosts and ports
  rewritten), agents spread over the nodes, the receiving group on one of them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import nats
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import scale_curves, scale_decisions, scale_registry
from bench.common import print_table, rss_mib
from bus import Bus, Continue, Module, NatsServer
from bus.testing import wait_for_chain

ROOT = str(Path(__file__).resolve().parent.parent)
SUBJECT = "prx.lifecycle.tool_call"
#: A per-unit cost within this factor of the first row's counts as growing with the work.
LINEAR_WITHIN = 2.0
_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def varz(server: NatsServer) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{server.http_port}/varz", timeout=5) as reply:
        data: dict[str, Any] = orjson.loads(reply.read())
    return data


def linear_line(name: str, first: float, last: float) -> str:
    ratio = last / first if first else float("inf")
    shape = "linear" if ratio <= LINEAR_WITHIN else "GROWS FASTER THAN THE WORK"
    return f"{name}: last row {ratio:.2f}x the first per unit of work -> {shape}"


def child(*args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )


def read_line(proc: subprocess.Popen[str]) -> list[str]:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child {proc.args!r} ended early")
    return line.split()


def tell(proc: subprocess.Popen[str], line: str) -> None:
    assert proc.stdin is not None
    proc.stdin.write(line + "\n")
    proc.stdin.flush()


# ---------------------------------------------------------------- agents


async def agents_child(url: str, count: int, rate: float, seconds: float) -> None:
    """``count`` Bus connections in this process; on ``go`` each emits ``rate`` events a second."""
    before = rss_mib()[0]
    buses: list[Bus] = []
    for start in range(0, count, 50):  # connect in bites: a thousand connects at once time out on 2 cores
        buses += await asyncio.gather(
            *(Bus(url, name=f"agent-{start + i}", connect_timeout=60).start() for i in range(min(50, count - start)))
        )
    print("ready", before, rss_mib()[0], flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    emitted = 0
    loop = asyncio.get_running_loop()
    begin = loop.time()
    ticks = int(seconds * rate)
    for tick in range(ticks):
        for index, bus in enumerate(buses):
            if await bus.emit(SUBJECT, {"tool": "shell", "t": time.time(), "agent": index}, session_id="s"):
                emitted += 1
        delay = begin + (tick + 1) / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
    for bus in buses:
        await bus.flush()
    print("done", emitted, flush=True)
    await asyncio.to_thread(sys.stdin.readline)
    for start in range(0, len(buses), 100):
        await asyncio.gather(*(bus.close() for bus in buses[start : start + 100]))


async def agents_row(servers: list[NatsServer], agents: int, rate: float, seconds: float) -> list[float]:
    """[agents, emitted, delivered/emitted, p99 ms, client RSS KiB per connection, server CPU %,
    server CPU us per event, server memory KiB per connection].

    Agent processes take the servers in turn; the receiving group sits on the last one (on a cluster,
    most events cross a route). Server CPU is the sum over the servers.
    """
    latencies: list[float] = []

    async def received(event: Any) -> None:
        latencies.append(time.time() - event.payload["t"])

    pids = [server.pid for server in servers if server.pid is not None]
    async with Bus(servers[-1].url, name="scale-sink") as sink:
        await sink.subscribe(SUBJECT, received, queue="scale", pending_msgs=1_000_000)
        await sink.subscribe(SUBJECT, received, queue="scale", pending_msgs=1_000_000)
        if len(servers) > 1:
            await asyncio.sleep(1.0)  # the group's interest crosses the routes (no flush covers that)
        server_mem0 = sum(varz(server)["mem"] for server in servers)
        procs = [
            child("--agents-child", servers[i % len(servers)].url, str(share), str(rate), str(seconds))
            for i, share in enumerate(_shares(agents, min(4, agents)))
        ]
        try:
            memory = [await asyncio.to_thread(read_line, proc) for proc in procs]
            server_mem = sum(varz(server)["mem"] for server in servers) - server_mem0
            cpu0, wall0 = sum(map(cpu_seconds, pids)), time.perf_counter()
            for proc in procs:
                tell(proc, "go")
            done = [await asyncio.to_thread(read_line, proc) for proc in procs]
            emitted = sum(int(line[1]) for line in done)
            await _settle(lambda: len(latencies), emitted)
            cpu = sum(map(cpu_seconds, pids)) - cpu0
            wall = time.perf_counter() - wall0
            for proc in procs:
                tell(proc, "stop")
        finally:
            for proc in procs:
                proc.wait(timeout=120)
    per_conn = sum(float(m[2]) - float(m[1]) for m in memory) * 1024 / agents
    ordered = sorted(latencies) or [float("nan")]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000
    delivered = len(latencies) / max(emitted, 1)
    server_per_conn = server_mem / 1024 / agents
    return [agents, emitted, delivered, p99, per_conn, cpu / wall * 100, cpu / max(emitted, 1) * 1e6, server_per_conn]


def _shares(total: int, parts: int) -> list[int]:
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


async def _settle(count: Any, target: int, quiet: float = 1.0, bound: float = 30.0) -> None:
    """Until ``count()`` reaches ``target`` or stops moving for ``quiet`` seconds (bounded)."""
    loop = asyncio.get_running_loop()
    end = loop.time() + bound
    last, still = -1, loop.time()
    while loop.time() < end and count() < target:
        if count() != last:
            last, still = count(), loop.time()
        elif loop.time() - still > quiet:
            return
        await asyncio.sleep(0.05)


async def agents_curve(servers: list[NatsServer], sizes: list[int], seconds: float, where: str) -> None:
    rows = [await agents_row(servers, n, 5.0, seconds) for n in sizes]
    first = rows[0]
    table = [
        [
            f"{int(r[0]):,}",
            f"{int(r[1]):,}",
            f"{r[2]:.4f}",
            f"{r[3]:.1f} ms",
            f"{r[4]:.0f} KiB",
            f"{r[5]:.1f}%",
            f"{r[6] / first[6]:.2f}",
            f"{r[4] / first[4]:.2f}" if first[4] > 0 else "-",
            f"{r[7]:.0f} KiB",
        ]
        for r in rows
    ]
    print_table(
        f"agents on {where}: each emits 5 events/s, one queue group receives",
        table,
        ["agents", "emitted", "delivered/emitted", "p99 emit->deliver", "RSS/conn", "server CPU",
         "server CPU/event (x first)", "RSS/conn (x first)", "server mem/conn"],
    )  # fmt: skip
    print(linear_line(f"agents on {where}, server CPU per event", first[6], rows[-1][6]))
    print(linear_line(f"agents on {where}, RSS per connection", max(first[4], 1.0), max(rows[-1][4], 1.0)))


def deploy_cluster(folder: Path) -> list[NatsServer]:
    """The 3-node cluster of deploy/nats/cluster-node-*.conf on loopback: its files, only hosts and ports changed."""
    ports = [_free_port() for _ in range(3)]
    nodes = []
    for index in range(3):
        text = (Path(ROOT) / "deploy" / "nats" / f"cluster-node-{index + 1}.conf").read_text()
        text = text.replace("0.0.0.0:6222", f"127.0.0.1:{ports[index]}")
        for other in range(3):
            text = text.replace(f"nats://nats-{other + 1}:6222", f"nats://127.0.0.1:{ports[other]}")
        assert "store_dir: /data/jetstream" in text, "the deploy file changed shape"
        text = text.replace("store_dir: /data/jetstream", f"store_dir: {folder / f'js-{index + 1}'}")
        config = folder / f"node-{index + 1}.conf"
        config.write_text(text)
        # JetStream as the file configures it (its own store_dir): not the launcher's -js -sd flags.
        nodes.append(NatsServer(config_file=config, http_port=0, jetstream=False))
    return nodes


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def start_cluster(nodes: list[NatsServer]) -> None:
    for node in nodes:
        await asyncio.to_thread(node.start)
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while not all(_routes(node) >= 2 for node in nodes):
        if loop.time() > end:
            raise RuntimeError("the cluster's routes did not come up within 30 s")
        await asyncio.sleep(0.1)


def _routes(node: NatsServer) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.http_port}/routez", timeout=5) as reply:
        return int(orjson.loads(reply.read()).get("num_routes", 0))


# ---------------------------------------------------------------- registry


def stage_of(tag: str, index: int) -> str:
    return f"scale.{tag}.m{index}"


async def modules_child(url: str, tag: str, first: int, count: int) -> None:
    """``count`` modules (one handler each, heartbeat 1 s) on one Bus, until told to stop.

    ``tag`` keeps each row's modules apart: approvals stay in the trust bucket from row to row.
    """
    async with Bus(url, name="scale-modules") as bus:
        tasks = []
        for index in range(first, first + count):
            module = Module(f"scale_{tag}_m{index}", heartbeat=None if tag.startswith("p2") else 1.0)

            async def allow(stage: str, payload: dict[str, Any]) -> Continue:
                return Continue()

            module.stage(stage_of(tag, index), name="allow")(allow)
            tasks.append(asyncio.create_task(module.serve(bus=bus)))
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _all_see(kernels: list[Bus], predicate: Any, bound: float = 60.0) -> float:
    """Seconds until ``predicate(view)`` holds for every kernel's view (bounded)."""
    started = time.perf_counter()
    end = started + bound
    while time.perf_counter() < end:
        if all(predicate(bus.middleware.view) for bus in kernels):
            return time.perf_counter() - started
        await asyncio.sleep(0.01)
    return float("nan")


def _runs(view: Any, stage: str) -> bool:
    chain = view.chains.get(stage)
    return bool(chain and any(link.trust.runs for link in chain.links))


def _waits(view: Any, stage: str) -> bool:
    chain = view.chains.get(stage)
    return bool(chain and chain.waiting)


def _gone(view: Any, stage: str) -> bool:
    chain = view.chains.get(stage)
    return chain is None or not (chain.links or chain.waiting)


async def _intercepting(kernels: list[Bus], stages: list[str], rate: float, done: list[int]) -> None:
    """Every kernel intercepts ``rate`` times a second, over ``stages`` in turn, until cancelled."""
    loop = asyncio.get_running_loop()
    begin, tick = loop.time(), 0
    payload = {"name": "shell", "input": {"command": "ls"}}
    while True:
        calls = (bus.intercept(stages[(i + tick) % len(stages)], payload) for i, bus in enumerate(kernels))
        await asyncio.gather(*calls)
        done[0] += len(kernels)
        tick += 1
        delay = begin + tick / rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)


async def registry_row(
    server: NatsServer, kernels_n: int, modules_n: int, idle_s: float, load: float = 0.0
) -> list[float]:
    """[kernels, modules, registry msgs/s, msgs/s per (kernel x module), kernels CPU %, modules CPU %,
    server CPU %, appear s, approved s, gone s, intercepts/s].

    ``load``: intercepts a second per kernel, from before the window to the end; the registry's
    messages are then the server's less four per intercept (request and reply, each in and out).
    """
    own = os.getpid()
    tag = f"k{kernels_n}x{modules_n}" + ("L" if load else "")
    modules = child("--modules-child", server.url, tag, "0", str(modules_n))
    kernels: list[Bus] = []
    late: subprocess.Popen[str] | None = None
    loading: asyncio.Task[None] | None = None
    calls = [0]
    try:
        await asyncio.to_thread(read_line, modules)
        for start in range(0, kernels_n, 25):
            size = min(25, kernels_n - start)
            batch = [Bus(server.url, name=f"kernel-{start + i}", connect_timeout=60) for i in range(size)]
            await asyncio.gather(*(bus.start() for bus in batch))
            await asyncio.gather(*(bus.middleware.start() for bus in batch))
            kernels += batch
        view = await kernels[0].middleware.start()
        await _all_see(kernels[:1], lambda v: all(_waits(v, stage_of(tag, i)) for i in range(modules_n)))
        for index in range(modules_n):
            chain = view.chains.get(stage_of(tag, index))
            approve = chain.waiting if chain is not None else ()
            for link in approve:
                await view.approve(link.decl)
        await _all_see(kernels, lambda v: all(_runs(v, stage_of(tag, i)) for i in range(modules_n)))
        assert server.pid is not None
        if load:
            stages = [stage_of(tag, i) for i in range(modules_n)]
            loading = asyncio.create_task(_intercepting(kernels, stages, load, calls))
            await asyncio.sleep(1.0)  # the load under way before the window
        before, calls0 = varz(server), calls[0]
        cpu0 = (cpu_seconds(own), cpu_seconds(modules.pid), cpu_seconds(server.pid))
        wall0 = time.perf_counter()
        await asyncio.sleep(idle_s)  # idle: heartbeats and their fan-out only (and the load, if any)
        wall = time.perf_counter() - wall0
        after, intercepts = varz(server), (calls[0] - calls0) / wall
        cpu = [
            (now - then) / wall * 100
            for now, then in zip(
                (cpu_seconds(own), cpu_seconds(modules.pid), cpu_seconds(server.pid)), cpu0, strict=True
            )
        ]
        msgs = (after["in_msgs"] - before["in_msgs"] + after["out_msgs"] - before["out_msgs"]) / wall
        msgs = max(msgs - 4 * intercepts, 0.0)
        late = child("--modules-child", server.url, tag, str(modules_n), "1")
        stage = stage_of(tag, modules_n)
        await asyncio.to_thread(read_line, late)
        appear = await _all_see(kernels, lambda v: _waits(v, stage))
        await _all_see(kernels[:1], lambda v: _waits(v, stage))
        chain = view.chains.get(stage)
        if chain is None or not chain.waiting:
            raise RuntimeError(f"the first kernel never saw {stage} waiting for approval")
        started = time.perf_counter()
        await view.approve(chain.waiting[0].decl)
        seen = await _all_see(kernels, lambda v: _runs(v, stage))
        approved = time.perf_counter() - started if seen == seen else seen  # nan: not seen within the bound
        late.send_signal(signal.SIGKILL)  # dies without deleting its announcement: liveness must notice
        late.wait()
        gone = await _all_see(kernels, lambda v: _gone(v, stage))
    finally:
        if loading is not None:
            loading.cancel()
            await asyncio.gather(loading, return_exceptions=True)
        tell(modules, "stop")
        modules.wait(timeout=60)
        if late is not None and late.poll() is None:
            late.kill()
        for start in range(0, len(kernels), 50):
            await asyncio.gather(*(bus.close() for bus in kernels[start : start + 50]))
    pairs = kernels_n * modules_n
    return [kernels_n, modules_n, msgs, msgs / pairs, *cpu, appear, approved, gone, intercepts]


async def registry_curve(server: NatsServer, grid: list[tuple[int, int]], idle_s: float, load: float = 0.0) -> None:
    rows = [await registry_row(server, k, m, idle_s, load) for k, m in grid]
    first = rows[0]
    table = [
        [
            f"{int(r[0])}",
            f"{int(r[1])}",
            f"{r[2]:.0f}/s",
            f"{r[3] / first[3]:.2f}",
            f"{r[4]:.1f}%",
            f"{r[5]:.1f}%",
            f"{r[6]:.1f}%",
            f"{r[7]:.2f} s",
            f"{r[8]:.2f} s",
            f"{r[9]:.2f} s",
            f"{r[10]:.0f}/s",
        ]
        for r in rows
    ]
    how = f"under load ({load:g} intercepts/s per kernel)" if load else "idle"
    print_table(
        f"kernels x modules, {how} (module heartbeat 1 s)",
        table,
        ["kernels", "modules", "registry msgs in+out", "msgs per kernel x module (x first)", "kernels' CPU",
         "modules' CPU", "server CPU", "all see new module", "all see it approved", "all see it die",
         "intercepts"],
    )  # fmt: skip
    print(linear_line(f"registry {how}, messages per kernel x module", first[3], rows[-1][3]))


# ---------------------------------------------------------------- chains


ECHO = "scale.echo"


async def chains_child(url: str, lengths: list[int]) -> None:
    """For each length n: a module of n handlers (``scale.one<n>``) and n modules of one (``scale.many<n>``)."""
    nc = await nats.connect(url)

    async def echo(msg: Any) -> None:
        await msg.respond(msg.data)

    await nc.subscribe(ECHO, cb=echo)
    async with Bus(url, name="scale-chains") as bus:
        modules = []
        for n in lengths:
            one = Module(f"scale_one{n}")
            previous: str | None = None
            for h in range(n):

                async def allow(stage: str, payload: dict[str, Any]) -> Continue:
                    return Continue()

                one.stage(f"scale.one{n}", name=f"h{h}", after=[previous] if previous else ())(allow)
                previous = f"h{h}"
            modules.append(one)
            for h in range(n):
                many = Module(f"scale_many{n}_{h}")

                async def allow_many(stage: str, payload: dict[str, Any]) -> Continue:
                    return Continue()

                after = [f"scale_many{n}_{h - 1}.h"] if h else ()
                many.stage(f"scale.many{n}", name="h", after=after)(allow_many)
                modules.append(many)
        tasks = [asyncio.create_task(module.serve(bus=bus)) for module in modules]
        print("ready", flush=True)
        await asyncio.to_thread(sys.stdin.readline)
        for task in tasks:
            task.cancel()
    await nc.close()


def _pct(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * pct))]


async def chains_curve(server: NatsServer, lengths: list[int], calls: int) -> None:
    payload = {"name": "shell", "input": {"command": "ls"}}
    proc = child("--chains-child", server.url, ",".join(map(str, lengths)))
    nc = await nats.connect(server.url)
    data = orjson.dumps({"stage": "x", "payload": payload, "ctx": {"depth": 0, "id": "x" * 16}})
    rows: list[tuple[int, str, float, float, float, float]] = []  # n, where, ours p50, p99, raw p50, p99
    try:
        await asyncio.to_thread(read_line, proc)
        async with Bus(server.url, name="scale-kernel", trust_new=True) as bus:
            for n in lengths:
                await wait_for_chain(bus, f"scale.one{n}", [f"scale_one{n}.h{h}" for h in range(n)], timeout=60)
                names = [f"scale_many{n}_{h}.h" for h in range(n)]
                await wait_for_chain(bus, f"scale.many{n}", names, timeout=60)

            async def timed(call: Any, times: int) -> list[float]:
                out = []
                for _ in range(times):
                    started = time.perf_counter()
                    await call()
                    out.append(time.perf_counter() - started)
                return out

            async def raw() -> None:
                await nc.request(ECHO, data, timeout=10)

            await timed(raw, calls // 5)
            for n in lengths:
                for where in ("one", "many"):
                    stage = f"scale.{where}{n}"

                    async def intercept(stage: str = stage) -> None:
                        await bus.intercept(stage, payload)

                    await timed(intercept, calls // 5)  # warm
                    base: list[float] = []
                    ours: list[float] = []
                    for _ in range(5):  # interleaved rounds: drift in the machine's load hits both alike
                        base += await timed(raw, calls // 5)
                        ours += await timed(intercept, calls // 5)
                    rows.append((n, where, _pct(ours, 0.5), _pct(ours, 0.99), _pct(base, 0.5), _pct(base, 0.99)))
    finally:
        tell(proc, "stop")
        proc.wait(timeout=60)
        await nc.close()
    for where, label in (("one", "in one module"), ("many", "one per module")):
        mine = [r for r in rows if r[1] == where]
        first = mine[0]
        table = [
            [
                str(r[0]),
                f"{r[2] * 1e6:.0f} us",
                f"{r[2] / r[4]:.2f}x",
                f"{r[3] * 1e6:.0f} us",
                f"{r[3] / r[5]:.2f}x",
                f"{r[2] / r[4] / r[0] / (first[2] / first[4]):.2f}",
            ]
            for r in mine
        ]
        print_table(
            f"chains, handlers {label}: intercept over one raw request (measured alternately)",
            table,
            ["handlers", "p50", "p50 / raw p50", "p99", "p99 / raw p99", "p50 per handler (x first)"],
        )
        per_handler = [r[2] / r[4] / r[0] for r in mine]
        print(linear_line(f"chains {label}, p50 per handler", per_handler[0], per_handler[-1]))


# ---------------------------------------------------------------- main


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller curves (about a minute)")
    parser.add_argument("--only", default="agents,registry,registry-idle,chains,decisions,hooks,journal,fleet,cluster")
    parser.add_argument("--seconds", type=float, default=8.0, help="emitting time per agents row")
    parser.add_argument("--agents-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--modules-child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--chains-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.agents_child:
        url, count, rate, seconds = args.agents_child
        await agents_child(url, int(count), float(rate), float(seconds))
        return
    if args.modules_child:
        url, tag, first, count = args.modules_child
        await modules_child(url, tag, int(first), int(count))
        return
    if args.chains_child:
        await chains_child(args.chains_child[0], [int(n) for n in args.chains_child[1].split(",")])
        return
    only = set(args.only.split(","))
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with NatsServer(http_port=0) as server:
        if "agents" in only:
            sizes = [1, 10, 100] if args.quick else [1, 10, 100, 1000]
            await agents_curve([server], sizes, 4.0 if args.quick else args.seconds, "one server")
        if "registry-idle" in only:
            await scale_registry.idle_curve(
                server, child, read_line, tell, 50, [1, 10, 100], 5.0 if args.quick else 10.0
            )
        if "registry" in only:
            grid = (
                [(1, 1), (10, 10), (50, 10)]
                if args.quick
                else [(1, 1), (10, 1), (1, 10), (10, 10), (50, 10), (10, 50), (200, 10)]
            )
            await registry_curve(server, grid, 3.0 if args.quick else 5.0)
            loaded = [(1, 1), (10, 10)] if args.quick else [(1, 1), (10, 10), (50, 10)]
            await registry_curve(server, loaded, 3.0 if args.quick else 5.0, load=2.0)
        if "chains" in only:
            await chains_curve(server, [1, 5, 20], 200 if args.quick else 500)
        if "decisions" in only:
            await scale_decisions.decisions_curve(server, child, ECHO, 50, 3.0 if args.quick else 8.0)
        if "hooks" in only:
            await scale_curves.hooks_curve(server, [1, 10, 100] if args.quick else [1, 10, 100, 1000], 2000)
        if "journal" in only:
            rates = [250.0, 1000.0] if args.quick else [250.0, 1000.0, 4000.0, 8000.0]
            await scale_curves.journal_curve(server, rates, 3.0 if args.quick else 5.0)
        if "fleet" in only:
            await scale_curves.fleet_curve(server, [1, 100, 10_000], 10_000 if args.quick else 20_000)
    if "cluster" in only:
        with tempfile.TemporaryDirectory(prefix="hookbus-scale-") as folder:
            nodes = deploy_cluster(Path(folder))
            try:
                await start_cluster(nodes)
                sizes = [1, 10, 100] if args.quick else [1, 10, 100, 1000]
                await agents_curve(nodes, sizes, 4.0 if args.quick else args.seconds, "the 3-node deploy cluster")
            finally:
                for node in nodes:
                    node.cleanup()
    print(f"\nload average at end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    asyncio.run(main())
