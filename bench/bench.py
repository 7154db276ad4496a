#!/usr/bin/python3
"""bench/bench.py - seconds and bytes of a token across the RAM budget ladder.

Owns: the benchmark run behind `make bench` (and `make bench-device`): it
  generates (or reuses) a full-width checkpoint, measures the device with the
  engine's own I/O layer (build/bench/devbench), runs prefill + decode at
  every budget of a ladder from the floor to fully resident
  (build/bench/decodebench: the calls of `moestream run --ids ... --gen N`,
  with counters split by phase), and derives per budget: decode s/token,
  bytes/token (trunk / experts), the I/O floor (bytes/token / measured device
  bandwidth), effective bandwidth, I/O wait versus compute, peak RSS, and the
  two ratios of the issue. It writes build/bench/results.json, a markdown
  table (build/bench/results.md) and the plot docs/perf/ladder.svg, and a
  projection for the real K3 from `moestream plan` of the released config.

Idea: counts (bytes per token, reads, hits) are exact and repeatable; times
  are noisy on a shared 2-core machine, so every ratio is formed from
  numbers measured in the same run, and the load average is recorded next to
  every measurement.

Usage:  /usr/bin/python3 bench/bench.py [all|device|render]
  all     (default) everything above
  device  only the device benchmark (prints a table)
  render  rebuild the markdown table, the SVG and the projection from an
          existing results.json (no measurement)
Environment (all optional):
  BUILD            build directory (default build)
  BENCH_QUICK=1    2 layers x 32 experts, fewer budgets and tokens (~3 min);
                   32 experts, not 16, so that the floor (16 slots) streams experts
  BENCH_DIR        checkpoint directory (default $BUILD/bench-model, quick:
                   $BUILD/bench-model-quick); regenerated when its stamp differs
  BENCH_LAYERS / BENCH_EXPERTS / BENCH_VOCAB / BENCH_SEED   checkpoint shape
  BENCH_GEN        tokens generated per budget (N - 1 decode feeds; default 6, quick 3)
  BENCH_BUDGETS    explicit ladder instead of the derived one: comma list of
                   RAM[:trunk=S][:expert=S], e.g. "4G,8G:trunk=6G:expert=1G"
  BENCH_IO / BENCH_QD   engine I/O backend and queue depth (default direct / 32, the
                        engine's; runs before 2026-12-02 15:15 used 4, before 18:00 16)
  BENCH_THREADS    compute threads (default 0 = all cores)
  BENCH_DEV_BYTES  bytes per device configuration (default 2G, quick 512M)
  BENCH_PROBE      0: skip the short device probe before and after every rung
                   (default on: O_DIRECT, huge pages, both patterns, qd 16 and BENCH_QD,
                   BENCH_PROBE_BYTES each, default 1G, quick 512M); the "that
                   device" columns form each rung's floor from the probes' mean
  BENCH_OUT        output directory (default $BUILD/bench)
  BENCH_SVG        plot path (default docs/perf/ladder.svg)
  BENCH_KERNELS    1: also run $BUILD/bench/bench_kernels in the same run and keep
                   its output (default 1, quick 0)
  BENCH_PACK       1: write the checksum sidecar and the packed trunk of the
                   checkpoint first (moestream verify, moestream pack), so every
                   rung reads the trunk from the pack; 0 (default): the rungs run
                   with --no-pack (a pack left in the directory is not read)
Does not: assert timings (tests never do), or run as part of `make test`.
"""
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# the released K3 config.json, kept in the repository for `plan` (docs/configs/)
K3_CONFIG = os.path.join(ROOT, "docs", "configs", "kimi-k3-config.json")
K3_EXPERT_BYTES = 17547264
K3_EXPERTS_PER_TOKEN = 16 * 92          # top-16 in each of the 92 MoE layers
K3_N_EXPERT = 896 * 92
GIB = float(1 << 30)
GB = 1e9


def env(name, default):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


QUICK = env("BENCH_QUICK", "0") not in ("0", "")
BUILD = env("BUILD", "build")
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
CFG = {
    "quick": QUICK,
    "layers": int(env("BENCH_LAYERS", 2 if QUICK else 6)),
    "experts": int(env("BENCH_EXPERTS", 32 if QUICK else 64)),
    "vocab": int(env("BENCH_VOCAB", 32768)),
    "seed": int(env("BENCH_SEED", 7)),
    "gen": int(env("BENCH_GEN", 3 if QUICK else 6)),
    "io": env("BENCH_IO", "direct"),
    "qd": int(env("BENCH_QD", 32)),
    "threads": int(env("BENCH_THREADS", 0)),
    "dev_bytes": env("BENCH_DEV_BYTES", "512M" if QUICK else "2G"),
    "dev_qds": "1,4,16,32" if QUICK else "1,2,4,8,16,32",
    "budgets": env("BENCH_BUDGETS", ""),
    "prompt_len": 32,
    "pack": env("BENCH_PACK", "0") not in ("0", ""),
}
MODEL = env("BENCH_DIR", os.path.join(BUILD, "bench-model-quick" if QUICK else "bench-model"))
OUT = env("BENCH_OUT", os.path.join(BUILD, "bench"))
SVG = env("BENCH_SVG", os.path.join(ROOT, "docs", "perf", "ladder.svg"))
MOESTREAM = os.path.join(BUILD, "moestream")
DEVBENCH = os.path.join(BUILD, "bench", "devbench")
DECODEBENCH = os.path.join(BUILD, "bench", "decodebench")
KERNELBENCH = os.path.join(BUILD, "bench", "bench_kernels")
MEMBW = os.path.join(BUILD, "bench", "membw")

# The targets (previous best engine on this machine kind, 6 x 64 checkpoint).
TARGETS = {
    "trunk_streams_ratio": (1.2, 1.4),
    "trunk_pinned_ratio": 2.6,
    "resident_s_per_token": 1.5,
    "kernel_fraction_of_membw": 0.30,
    "prefill_ratio": 7.0,
}


def log(msg):
    print("bench: " + msg, file=sys.stderr, flush=True)


def load():
    return [round(x, 2) for x in os.getloadavg()]


def sh(cmd, check=True, timeout=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    if check and r.returncode != 0:
        raise SystemExit("bench: %s exited %d:\n%s" % (" ".join(cmd), r.returncode, r.stderr[-2000:]))
    return r


# ---------------------------------------------------------------------------
# sizes
# ---------------------------------------------------------------------------

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def human_to_bytes(num, unit):
    return int(round(float(num) * UNITS[unit]))


def gib_arg(b):
    """A --ram argument (the CLI reads G as GiB) for b bytes, 0.01 GiB resolution, rounded up."""
    return "%.2fG" % (math.ceil(b / GIB * 100 - 1e-9) / 100)


def parse_size_arg(s):
    m = re.fullmatch(r"([0-9.]+)([kKmMgGtT]?)[bB]?", s.strip())
    if not m:
        raise SystemExit("bench: bad size '%s'" % s)
    mul = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * mul)


# ---------------------------------------------------------------------------
# machine
# ---------------------------------------------------------------------------

def machine_info():
    info = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "load_at_start": load()}
    try:
        lscpu = sh(["lscpu"]).stdout
        for key, name in (("Model name", "cpu"), ("CPU(s)", "cpus"), ("L3 cache", "l3")):
            m = re.search(r"^%s:\s*(.+)$" % re.escape(key), lscpu, re.M)
            if m:
                info[name] = m.group(1).strip()
    except (OSError, SystemExit):
        pass
    try:
        with open("/proc/meminfo") as f:
            mem = f.read()
        info["mem_total_bytes"] = int(re.search(r"MemTotal:\s+(\d+)", mem).group(1)) * 1024
        info["mem_available_bytes"] = int(re.search(r"MemAvailable:\s+(\d+)", mem).group(1)) * 1024
    except (OSError, AttributeError):
        pass
    try:
        dev = os.stat(MODEL if os.path.exists(MODEL) else ROOT).st_dev
        blk = "/sys/dev/block/%d:%d" % (os.major(dev), os.minor(dev))
        name = os.path.basename(os.path.realpath(blk))
        q = os.path.join("/sys/block", name, "queue")
        disk = {"name": name}
        for k in ("max_segments", "max_sectors_kb", "rotational", "nr_requests"):
            try:
                with open(os.path.join(q, k)) as f:
                    disk[k] = f.read().strip()
            except OSError:
                pass
        info["disk"] = disk
    except OSError:
        pass
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            info["thp"] = f.read().strip()
    except OSError:
        pass
    info["kernel"] = os.uname().release
    try:
        info["commit"] = sh(["git", "-C", ROOT, "rev-parse", "HEAD"]).stdout.strip()
        st = sh(["git", "--no-optional-locks", "-C", ROOT, "status", "--porcelain",
                 "--untracked-files=no"], check=False).stdout
        info["dirty_files"] = len([x for x in st.splitlines() if x.strip()])
    except (OSError, SystemExit):
        pass
    return info


# ---------------------------------------------------------------------------
# checkpoint
# ---------------------------------------------------------------------------

def ensure_model():
    msgen = os.path.join(ROOT, "tools", "msgen.py")
    h = hashlib.sha1()
    tools = os.path.join(ROOT, "tools")
    for p in (msgen, os.path.join(tools, "mslib.py"), os.path.join(tools, "stwrite.py")):
        with open(p, "rb") as f:
            h.update(f.read())
    args = ["--preset", "wide", "--layers", str(CFG["layers"]), "--experts", str(CFG["experts"]),
            "--vocab", str(CFG["vocab"]), "--seed", str(CFG["seed"])]
    stamp = h.hexdigest()[:16] + " " + " ".join(args)
    stamp_path = os.path.join(MODEL, ".bench-stamp")
    try:
        with open(stamp_path) as f:
            if f.read().strip() == stamp:
                log("reusing %s" % MODEL)
                return {"generated": False, "msgen_args": args}
    except OSError:
        pass
    log("generating %s (msgen %s) ..." % (MODEL, " ".join(args)))
    if os.path.isdir(MODEL):
        for name in os.listdir(MODEL):
            if name.endswith(".safetensors") or name in ("config.json", ".bench-stamp",
                                                         "model.safetensors.index.json",
                                                         "msgen.json", "moestream.sums",
                                                         "moestream.pack"):
                os.unlink(os.path.join(MODEL, name))
    t0 = time.time()
    sh(["/usr/bin/python3", msgen, MODEL] + args)
    with open(stamp_path, "w") as f:
        f.write(stamp + "\n")
    return {"generated": True, "msgen_args": args, "generate_s": round(time.time() - t0, 1)}


def shards():
    return sorted(os.path.join(MODEL, n) for n in os.listdir(MODEL) if n.endswith(".safetensors"))


def checkpoint_layout():
    """Bytes per class from the safetensors headers: trunk per layer, experts."""
    trunk_layer, expert_bytes, other, total = {}, 0, 0, 0
    n_expert_tensors = 0
    for path in shards():
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            hdr = json.loads(f.read(n))
        for name, t in hdr.items():
            if name == "__metadata__":
                continue
            nb = t["data_offsets"][1] - t["data_offsets"][0]
            total += nb
            m = re.search(r"\.layers\.(\d+)\.", name)
            if ".experts." in name:
                expert_bytes += nb
                n_expert_tensors += 1
            elif m:
                il = int(m.group(1))
                trunk_layer[il] = trunk_layer.get(il, 0) + nb
            else:
                other += nb
    n_experts = n_expert_tensors // 6
    with open(os.path.join(MODEL, "config.json")) as f:
        tc = json.load(f).get("text_config", {})
    n_layers = tc.get("num_hidden_layers", len(trunk_layer))
    return {"n_moe_layers": n_layers - tc.get("first_k_dense_replace", 1),
            "experts_per_token": tc.get("num_experts_per_token", 16),"total_bytes": total, "trunk_layer_bytes": [trunk_layer[k] for k in sorted(trunk_layer)],
            "global_bytes": other, "expert_region_bytes": expert_bytes // max(1, n_experts),
            "n_expert_regions": n_experts, "expert_total_bytes": expert_bytes}


# ---------------------------------------------------------------------------
# memory plan (moestream plan)
# ---------------------------------------------------------------------------

SZ = r"([0-9.]+) (B|KiB|MiB|GiB|TiB)"


def parse_plan(text):
    p = {}

    def grab(key, pattern, conv):
        m = re.search(pattern, text, re.M)
        if m:
            p[key] = conv(m)
    grab("session_bytes", r"^\s+session \(.*\): " + SZ, lambda m: human_to_bytes(m.group(1), m.group(2)))
    grab("overhead_bytes", r"^\s+process overhead \+ slack: " + SZ,
         lambda m: human_to_bytes(m.group(1), m.group(2)))
    m = re.search(r"^\s+trunk pinned\s+(\d+)\s+" + SZ + r"\s+of (\d+) trunk regions \(" + SZ + r"\)",
                  text, re.M)
    if m:
        p["n_trunk_pinned"] = int(m.group(1))
        p["trunk_pinned_bytes"] = human_to_bytes(m.group(2), m.group(3))
        p["n_trunk"] = int(m.group(4))
        p["trunk_total_bytes"] = human_to_bytes(m.group(5), m.group(6))
    m = re.search(r"^\s+trunk ring\s+(\d+)\s+" + SZ + r"\s+(\d+) slots of " + SZ + "; " + SZ +
                  r" streamed per pass", text, re.M)
    if m:
        p["n_trunk_streamed"] = int(m.group(1))
        p["ring_bytes"] = human_to_bytes(m.group(2), m.group(3))
        p["ring_slots"] = int(m.group(4))
        p["streamed_bytes_per_pass"] = human_to_bytes(m.group(7), m.group(8))
    m = re.search(r"^\s+expert cache\s+(\d+)\s+" + SZ + r"\s+slots of " + SZ + r" for (\d+) experts",
                  text, re.M)
    if m:
        p["expert_slots"] = int(m.group(1))
        p["expert_cache_bytes"] = human_to_bytes(m.group(2), m.group(3))
        p["expert_slot_bytes"] = human_to_bytes(m.group(4), m.group(5))
        p["n_expert_regions"] = int(m.group(6))
    m = re.search(r"^\s+global by parts\s+\d+\s+" + SZ + r"\s+(.*)$", text, re.M)
    if m:
        p["sparse_resident"] = "resident" in m.group(3) and "on disk" not in m.group(3)
    grab("store_total_bytes", r"^\s+total\s+" + SZ, lambda m: human_to_bytes(m.group(1), m.group(2)))
    grab("store_floor_bytes", r"floor " + SZ + ",", lambda m: human_to_bytes(m.group(1), m.group(2)))
    grab("store_full_bytes", r"everything resident " + SZ, lambda m: human_to_bytes(m.group(1), m.group(2)))
    grab("total_planned_bytes", r"^total planned: " + SZ, lambda m: human_to_bytes(m.group(1), m.group(2)))
    grab("needs_bytes", r"the smallest plan needs " + SZ + " in all",
         lambda m: human_to_bytes(m.group(1), m.group(2)))
    return p


def plan(model, ram):
    # decodebench does not speculate unless asked: its plan is --speculate 0's
    r = sh([MOESTREAM, "plan", model, "--ram", ram, "--speculate", "0"], check=False)
    p = parse_plan(r.stdout)
    p["fits"] = r.returncode == 0
    p["ram"] = ram
    return p


def floor_row(rows):
    """The smallest rung whose trunk streams: the floor. (Not "no trunk region pinned": the
    planner pins a region of at most 1/32 of the largest in every plan, store/plan.h.)"""
    streams = [r for r in rows if r["plan"].get("n_trunk_streamed", 0) > 0]
    return streams[0] if streams else None


def derive_ladder():
    """Budgets (strings for --ram) from the floor to fully resident."""
    if CFG["budgets"]:
        rungs = []
        for item in CFG["budgets"].split(","):
            parts = item.strip().split(":")
            rung = {"ram": parts[0], "label": parts[0]}
            for extra in parts[1:]:
                k, _, v = extra.partition("=")
                if k not in ("trunk", "expert"):
                    raise SystemExit("bench: BENCH_BUDGETS item '%s': use trunk=S or expert=S" % item)
                rung[k + "_ram"] = v
                rung["label"] += " " + k + "=" + v
            rungs.append(rung)
        return rungs
    full = plan(MODEL, "0")
    floor = plan(MODEL, "1M")
    if "needs_bytes" not in floor or "total_planned_bytes" not in full:
        raise SystemExit("bench: cannot read the plan of %s" % MODEL)
    step = int(0.05 * GIB)

    def first_fit(lo_bytes, pred):
        """Smallest budget >= lo_bytes (0.05 GiB steps, bisection) whose plan satisfies pred."""
        lo, hi = lo_bytes, full["total_planned_bytes"] + 4 * step
        if not pred(plan(MODEL, gib_arg(hi))):
            return hi
        while hi - lo > step // 2:
            mid = (lo + hi) // 2
            if pred(plan(MODEL, gib_arg(mid))):
                hi = mid
            else:
                lo = mid
        return hi
    # margins: the engine measures its own overhead at open; 3% + 64 MiB over the plan
    f = first_fit(floor["needs_bytes"], lambda p: p["fits"])
    f = int(f * 1.03) + (64 << 20)
    pinned = first_fit(f, lambda p: p["fits"] and p.get("n_trunk_streamed", 1) == 0)
    pinned = int(pinned * 1.02) + (64 << 20)
    r = int(full["total_planned_bytes"] * 1.03) + (128 << 20)
    if QUICK:
        points = [("floor", f), ("trunk 50%", (f + pinned) // 2), ("trunk pinned", pinned),
                  ("resident", r)]
    else:
        points = [("floor", f), ("trunk 1/3", f + (pinned - f) // 3),
                  ("trunk 2/3", f + 2 * (pinned - f) // 3), ("trunk pinned", pinned),
                  ("experts 1/2", (pinned + r) // 2), ("resident", r)]
    rungs, seen = [], set()
    for label, b in points:
        arg = gib_arg(b)
        if arg in seen:
            continue
        seen.add(arg)
        rungs.append({"ram": arg, "label": label})
    return rungs


# ---------------------------------------------------------------------------
# device
# ---------------------------------------------------------------------------

def run_device(layout, extra=()):
    tl = sorted(layout["trunk_layer_bytes"])
    layer_bytes = tl[len(tl) // 2] if tl else 850000000
    cmd = [DEVBENCH, "--bytes", CFG["dev_bytes"], "--qd", CFG["dev_qds"],
           "--layer-bytes", str(layer_bytes)] + list(extra) + shards()
    log("device: %s" % " ".join(cmd[:9]))
    before = load()
    r = sh(cmd, check=False)
    rows = []
    for line in r.stdout.splitlines():
        try:
            rows.append(json.loads(line))
        except ValueError:
            pass
    if not rows:
        raise SystemExit("bench: devbench printed nothing:\n" + r.stderr)
    return {"cmd": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd),
            "layer_bytes": layer_bytes, "load_before": before, "load_after": load(), "rows": rows}


def probe_device(layout):
    """A short device measurement next to a rung (the virtual disk drifts by
    +-20% within a run): O_DIRECT into huge pages, both patterns, the engine's
    queue depth and 16; BENCH_PROBE=0 skips it."""
    if os.environ.get("BENCH_PROBE", "1") == "0":
        return None
    qds = ",".join(sorted({str(CFG["qd"]), "16"}, key=int))
    return run_device(layout, ("--backend", "direct", "--buf", "huge", "--bytes",
                               env("BENCH_PROBE_BYTES", "512M" if QUICK else "1G"), "--qd", qds))


def probe_bw(probes, pattern):
    """Mean over the probes around a rung of each probe's best GB/s for pattern."""
    rows = [device_bw(p, pattern) for p in probes if p]
    v = [r["gbps"] for r in rows if r]
    return sum(v) / len(v) if v else None


def device_bw(dev, pattern, backend=None, qd=None, buf="huge"):
    """Best GB/s among matching rows (None = any)."""
    best = None
    for r in dev["rows"]:
        if "gbps" not in r or r["pattern"] != pattern or r["buf"] != buf:
            continue
        if backend and r["backend"] != backend:
            continue
        if qd and r["qd"] != qd:
            continue
        if best is None or r["gbps"] > best["gbps"]:
            best = r
    return best


def device_table(dev):
    rows = [r for r in dev["rows"] if "gbps" in r]
    qds = sorted({r["qd"] for r in rows})
    lines = ["| backend | buffer | pattern | " + " | ".join("qd %d" % q for q in qds) + " |",
             "|---|---|---|" + "---:|" * len(qds)]
    keys = []
    for r in rows:
        k = (r["backend"], r["buf"], r["pattern"])
        if k not in keys:
            keys.append(k)
    for k in keys:
        cells = []
        for q in qds:
            m = [r for r in rows if (r["backend"], r["buf"], r["pattern"]) == k and r["qd"] == q]
            cells.append("%.2f" % m[0]["gbps"] if m else "")
        pat = k[2]
        if pat == "expert":
            pat = "16 x 17.5 MB"
        else:
            pat = "1 x %.0f MB" % (dev["layer_bytes"] / 1e6)
        lines.append("| %s | %s | %s | %s |" % (k[0], k[1], pat, " | ".join(cells)))
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# decode ladder
# ---------------------------------------------------------------------------

def prompt_ids():
    v = CFG["vocab"]
    return [1 + (i * 7919 + 13) % (v - 2) for i in range(CFG["prompt_len"])]


def ensure_pack():
    """BENCH_PACK=1: the sidecar and the pack (each written when missing)."""
    out = {}
    for what, name in (("verify", "moestream.sums"), ("pack", "moestream.pack")):
        if os.path.exists(os.path.join(MODEL, name)):
            log("reusing %s" % name)
            continue
        t0 = time.time()
        r = sh([MOESTREAM, what, MODEL])
        out[what] = {"s": round(time.time() - t0, 1), "out": r.stdout.strip()}
        log("%s: %s" % (what, r.stdout.strip()))
    return out


def engine_args(rung):
    a = ["--ram", rung["ram"], "--io", CFG["io"], "--queue-depth", str(CFG["qd"])]
    if not CFG["pack"]:
        a += ["--no-pack"]
    if CFG["threads"]:
        a += ["--threads", str(CFG["threads"])]
    if rung.get("trunk_ram"):
        a += ["--trunk-ram", rung["trunk_ram"]]
    if rung.get("expert_ram"):
        a += ["--expert-ram", rung["expert_ram"]]
    return a


def run_rung(rung):
    ids = ",".join(str(x) for x in prompt_ids())
    for attempt in range(3):
        cmd = [DECODEBENCH, MODEL, "--ids", ids, "--gen", str(CFG["gen"])] + engine_args(rung)
        before = load()
        t0 = time.time()
        r = sh(cmd, check=False)
        if r.returncode == 2 and "budget" in r.stderr.lower() and not CFG["budgets"]:
            # the engine's measured overhead exceeded the plan's estimate: 0.1 GiB more
            b = parse_size_arg(rung["ram"]) + int(0.1 * GIB)
            log("  %s refused (%s); retrying at %s" % (rung["ram"], r.stderr.strip()[-160:], gib_arg(b)))
            rung["ram"] = gib_arg(b)
            continue
        break
    if r.returncode != 0:
        return {"error": r.stderr.strip()[-500:], "exit": r.returncode}
    res = json.loads(r.stdout)
    res["wall_s"] = round(time.time() - t0, 2)
    res["load_before"] = before
    res["load_after"] = load()
    return res


def crosscheck(rung, res):
    """`moestream run --json` at the same budget: same ids, same total bytes."""
    ids = ",".join(str(x) for x in prompt_ids())
    cmd = [MOESTREAM, "run", MODEL, "--ids", ids, "--gen", str(CFG["gen"]), "--json",
           "--quiet"] + engine_args(rung)
    r = sh(cmd, check=False)
    out = {"cmd": " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c
                           for c in cmd).replace(ids, "<32 ids>")}
    if r.returncode != 0:
        out["error"] = r.stderr.strip()[-300:]
        return out
    j = json.loads(r.stdout)
    st = j["stats"]
    ours = (res["prefill"]["trunk_bytes"] + res["prefill"]["expert_bytes"] +
            res["decode"]["trunk_bytes"] + res["decode"]["expert_bytes"])
    out.update({"cli_bytes_read": st["bytes_read"], "decodebench_bytes_read": ours,
                "bytes_equal": st["bytes_read"] == ours,
                "ids_equal": j["generated_ids"] == res["generated_ids"],
                "cli_s_per_token": st["s_per_token"], "cli_prefill_s": st["prefill_s"]})
    return out


# ---------------------------------------------------------------------------
# derived numbers
# ---------------------------------------------------------------------------

def derive(results):
    dev = results["device"]
    bw = {}
    for pat in ("layer", "expert"):
        best = device_bw(dev, pat)
        eng = device_bw(dev, pat, backend=CFG["io"] if CFG["io"] != "pread" else "direct",
                        qd=CFG["qd"])
        bw[pat] = {"best_gbps": best["gbps"], "best_cfg": "%s qd %d" % (best["backend"], best["qd"]),
                   "engine_gbps": eng["gbps"] if eng else best["gbps"]}
        four = device_bw(dev, pat, buf="4k")
        bw[pat]["best_4k_gbps"] = four["gbps"] if four else None
    results["device_bw"] = bw
    rows = []
    for rung in results["ladder"]:
        res = rung.get("result", {})
        if "decode" not in res or res["decode"]["tokens"] == 0:
            continue
        d, pf = res["decode"], res["prefill"]
        n = d["tokens"]
        per = [t["s"] for t in res["decode_tokens"]]
        row = {"label": rung["label"], "ram": rung["ram"], "plan": rung.get("plan", {}),
               "decode_tokens": n, "overrides": bool(rung.get("trunk_ram") or rung.get("expert_ram")),
               "kernels": res.get("kernels")}    # the kernel table (decodebench reports it)
        row["s_per_token"] = d["s"] / n
        row["s_per_token_median"] = sorted(per)[len(per) // 2]
        row["s_per_token_min"] = min(per)
        row["trunk_bytes_per_token"] = d["trunk_bytes"] / n
        row["expert_bytes_per_token"] = d["expert_bytes"] / n
        row["bytes_per_token"] = row["trunk_bytes_per_token"] + row["expert_bytes_per_token"]
        row["reads_per_token"] = d["reads"] / n
        row["hit_rate"] = d["expert_hits"] / d["expert_requests"] if d["expert_requests"] else None
        row["io_wait_per_token"] = d["io_wait_s"] / n
        row["compute_per_token"] = row["s_per_token"] - row["io_wait_per_token"]
        row["cpu_per_token"] = d["cpu_s"] / n
        if d.get("io_busy_s"):
            # the disk as the engine saw it during decode: time with at least one read in
            # flight, the mean number in flight then, and the bandwidth it delivered then
            row["busy_per_token"] = d["io_busy_s"] / n
            row["busy_share"] = row["busy_per_token"] / row["s_per_token"]
            row["inflight_mean"] = d["io_inflight_s"] / d["io_busy_s"]
            row["busy_gbps"] = row["bytes_per_token"] / row["busy_per_token"] / GB
        steady = res["decode_tokens"][1:]
        if steady and "minor_faults" in steady[0]:
            # page faults after the first decode token: memory first touched per token
            row["faults_per_token_steady"] = sum(t["minor_faults"] for t in steady) / len(steady)
        for kind, key in (("best", "best_gbps"), ("engine", "engine_gbps")):
            fl = (row["trunk_bytes_per_token"] / (bw["layer"][key] * GB) +
                  row["expert_bytes_per_token"] / (bw["expert"][key] * GB))
            row["io_floor_" + kind] = fl
        fl = row["io_floor_best"]
        has_io = row["bytes_per_token"] > 0
        row["ratio_floor"] = row["s_per_token"] / fl if has_io else None
        # the same floor with the device as measured right before and after this rung
        probes = [rung.get("probe_before"), rung.get("probe_after")]
        pl, pe = probe_bw(probes, "layer"), probe_bw(probes, "expert")
        if pl and pe:
            row["probe_gbps"] = {"layer": pl, "expert": pe}
            row["io_floor_adjacent"] = (row["trunk_bytes_per_token"] / (pl * GB) +
                                        row["expert_bytes_per_token"] / (pe * GB))
            row["ratio_adjacent"] = row["s_per_token"] / row["io_floor_adjacent"] if has_io else None
        row["eff_gbps"] = row["bytes_per_token"] / row["s_per_token"] / GB
        row["device_gbps"] = row["bytes_per_token"] / fl / GB if has_io else None
        row["ratio_bw"] = row["eff_gbps"] / row["device_gbps"] if has_io else None
        pb = pf["trunk_bytes"] + pf["expert_bytes"]
        pfl = (pf["trunk_bytes"] / (bw["layer"]["best_gbps"] * GB) +
               pf["expert_bytes"] / (bw["expert"]["best_gbps"] * GB))
        row.update({"prefill_s": pf["s"], "prefill_tokens": pf["tokens"], "prefill_bytes": pb,
                    "prefill_trunk_bytes": pf["trunk_bytes"], "prefill_expert_bytes": pf["expert_bytes"],
                    "prefill_io_floor": pfl, "prefill_ratio": pf["s"] / pfl if pb > 0 else None,
                    "prefill_io_wait": pf["io_wait_s"], "prefill_cpu": pf["cpu_s"],
                    "open_s": res["open_s"], "peak_rss_bytes": res["peak_rss_bytes"],
                    "load": res["load_before"], "generated_ids": res["generated_ids"]})
        rows.append(row)
    # the compute floor: the fully resident rung (no bytes read per token)
    resident = [r for r in rows if r["bytes_per_token"] == 0]
    comp = min(r["s_per_token"] for r in resident) if resident else None
    results["compute_floor_s"] = comp
    for r in rows:
        if comp is None:
            continue
        io = r["io_floor_best"]
        r["serial_model_s"] = io + comp
        r["overlap_model_s"] = max(io, comp)
        small = min(io, comp)
        r["overlap_fraction"] = ((io + comp - r["s_per_token"]) / small) if small > 0 else None
        # the target: decode s/token / max(I/O floor, compute floor)
        r["target_ratio"] = r["s_per_token"] / max(io, comp)
        if r.get("busy_per_token"):
            # against the disk's own busy time in the same tokens: the part of the target
            # ratio that is idle disk, without the device's drift between probe and run
            r["target_ratio_busy"] = r["s_per_token"] / max(r["busy_per_token"], comp)
        if r.get("io_floor_adjacent") is not None:
            r["target_ratio_adjacent"] = r["s_per_token"] / max(r["io_floor_adjacent"], comp)
    results["rows"] = rows
    ids = {json.dumps(r["generated_ids"]) for r in rows}
    results["ids_identical_across_budgets"] = len(ids) == 1
    # bytes touched per token (for the compute rate): the floor rung reads every trunk byte
    lay = results["layout"]
    n_moe, topk = lay["n_moe_layers"], lay["experts_per_token"]
    touched = None
    fr = floor_row(rows)
    if fr:
        touched = (fr["trunk_bytes_per_token"] + fr["plan"].get("trunk_pinned_bytes", 0) +
                   n_moe * topk * lay["expert_region_bytes"])
    results["touched_bytes_per_token"] = touched
    if comp and touched:
        results["compute_gbps"] = touched / comp / GB


def kernel_summary(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"read bandwidth, (\d) threads?: ([0-9.]+) GB/s", line)
        if m:
            out["read_gbps_%s" % m.group(1)] = float(m.group(2))
        m = re.match(r"memcpy 1 thread: ([0-9.]+) GB/s copied \(([0-9.]+) GB/s read\+write\)", line)
        if m:
            out["memcpy_gbps"] = float(m.group(1))
            out["memcpy_rw_gbps"] = float(m.group(2))
        m = re.match(r"matvec_(bf16|mxfp4)\s+([\w-]+)\s+(\d+x\d+)\s+(\d) thr: hot\s+([0-9.]+) GB/s\s+cold\s+([0-9.]+) GB/s", line)
        if m:
            # one entry per kind, ISA, shape and thread count (the MXFP4 gate/up and
            # down shapes differ: neither may hide the other)
            out["%s_%s_%s_%st" % (m.group(1), m.group(2), m.group(3), m.group(4))] = {
                "hot": float(m.group(5)), "cold": float(m.group(6))}
    return out


# ---------------------------------------------------------------------------
# projection for the real K3
# ---------------------------------------------------------------------------

def overlap_of(row, comp):
    """Measured overlap of I/O and compute at one rung: 0 = serial (s = io + compute),
    1 = perfect (s = max(io, compute)); clipped to [0, 1]. The I/O floor is the one of
    the device as measured right before and after the rung where the run has those
    probes (the disk drifts during a run: on machine C from 2.2 to 1.75 GB/s, and
    against the start-of-run device the floor rung showed no overlap at all), else
    the start-of-run device's."""
    if row is None or comp is None:
        return None
    io = row.get("io_floor_adjacent") or row["io_floor_best"]
    small = min(io, comp)
    if small <= 0:
        return None
    return max(0.0, min(1.0, (io + comp - row["s_per_token"]) / small))


def projection(results):
    """Seconds per token of the real K3 from its plan, the measured compute rate and the
    measured overlap. Model: t = io + compute - overlap * min(io, compute), where
    io = bytes per token / drive GB/s (the device pattern is the engine's own, so the
    I/O layer's efficiency is folded into the overlap), compute = bytes touched per
    token / the compute rate measured fully resident, and overlap is measured at the
    rung of the same regime (trunk streaming: the floor; trunk pinned: experts only)."""
    rows = results.get("rows", [])
    comp_gbps = results.get("compute_gbps")
    if not os.path.exists(K3_CONFIG) or not rows or not comp_gbps:
        return None
    comp_floor = results.get("compute_floor_s")
    pinned = [r for r in rows if r["plan"].get("n_trunk_streamed", 1) == 0 and r["expert_bytes_per_token"] > 0]
    ov_stream = overlap_of(floor_row(rows), comp_floor)
    ov_pinned = overlap_of(pinned[0] if pinned else None, comp_floor)
    full = plan(K3_CONFIG, "0")
    k3_trunk_total = full.get("trunk_total_bytes", 0)
    touched = k3_trunk_total + K3_EXPERTS_PER_TOKEN * K3_EXPERT_BYTES
    comp = touched / (comp_gbps * GB)
    out = {"config": os.path.relpath(K3_CONFIG, ROOT), "overlap_trunk_streams": ov_stream,
           "overlap_trunk_pinned": ov_pinned, "compute_gbps": comp_gbps,
           "k3_touched_bytes_per_token": touched, "compute_s": comp, "rows": []}
    for ram in ("8G", "32G", "128G"):
        p = plan(K3_CONFIG, ram)
        streamed = p.get("streamed_bytes_per_pass", 0)
        slots = p.get("expert_slots", 0)
        # uniform routing: a cache of `slots` experts holds slots / 82432 of them; LRU
        # keeps the previous token's experts (30% repeats, spec 8) only from 1472 + 16
        # slots up: below that the cyclic pattern evicts each before its reuse
        hit = min(1.0, slots / K3_N_EXPERT)
        experts = K3_EXPERTS_PER_TOKEN * K3_EXPERT_BYTES * (1 - hit)
        ov = ov_stream if streamed > 0 else ov_pinned
        for drive in (3.5, 7.0, 14.0):
            io = (streamed + experts) / (drive * GB)
            row = {"ram": ram, "drive_gbps": drive, "trunk_streamed_bytes": streamed,
                   "expert_slots": slots, "expert_hit": hit, "expert_bytes": experts,
                   "io_floor_s": io, "compute_s": comp, "overlap": ov,
                   "ideal_s": max(io, comp), "serial_s": io + comp}
            if ov is None:
                row["projected_s"], row["limit"] = None, "overlap not measured"
            else:
                row["projected_s"] = io + comp - ov * min(io, comp)
                lim = "disk" if io > comp else "compute"
                row["limit"] = "%s (%s)" % (lim, "I/O %.1f s vs compute %.1f s, %.0f%% overlapped"
                                            % (io, comp, 100 * ov))
            out["rows"].append(row)
    return out


# ---------------------------------------------------------------------------
# output: markdown, SVG
# ---------------------------------------------------------------------------

def fmt(v, spec="%.2f"):
    return "" if v is None else spec % v


def plan_cell(p):
    if not p:
        return ""
    ring = p.get("n_trunk_streamed", 0)
    s = "%d/%d pinned" % (p.get("n_trunk_pinned", 0), p.get("n_trunk", 0))
    if ring:
        s += ", %.1f GiB streamed" % (p.get("streamed_bytes_per_pass", 0) / GIB)
    s += ", %d exp slots" % p.get("expert_slots", 0)
    return s


def markdown(results):
    L = []
    m = results["machine"]
    L.append("Run %s, commit %s, load at start %s. Checkpoint: %s (%.2f GB, msgen %s)."
             % (m.get("date"), m.get("commit", "?")[:12], m.get("load_at_start"),
                os.path.relpath(MODEL, ROOT), results["layout"]["total_bytes"] / GB,
                " ".join(results["model"]["msgen_args"])))
    tabs = sorted({r.get("kernels") for r in results.get("rows", []) if r.get("kernels")})
    if tabs:
        L[-1] += " Kernels: %s." % ", ".join(tabs)
    bw = results["device_bw"]
    L.append("")
    L.append("Device (engine I/O layer, O_DIRECT into 2 MiB huge-page buffers): layer-sized reads "
             "%.2f GB/s best (%s), %.2f at the engine's qd %d; expert batches %.2f GB/s best (%s), "
             "%.2f at qd %d. Into 4 KiB pages: %s / %s GB/s."
             % (bw["layer"]["best_gbps"], bw["layer"]["best_cfg"], bw["layer"]["engine_gbps"], CFG["qd"],
                bw["expert"]["best_gbps"], bw["expert"]["best_cfg"], bw["expert"]["engine_gbps"], CFG["qd"],
                fmt(bw["layer"]["best_4k_gbps"]), fmt(bw["expert"]["best_4k_gbps"])))
    L.append("")
    L.append(device_table(results["device"]))
    de = results.get("device_end")
    if de:
        L.append("")
        L.append("Device again at the end of the run (load %s), huge-page buffers, %s:"
                 % (de["load_before"], CFG["io"]))
        L.append("")
        L.append(device_table(de))
    L.append("")
    L.append("| budget (--ram) | plan | decode s/token | I/O floor s | ratio | device next to the rung "
             "(layer / expert GB/s) | I/O floor s, that device | ratio, that device | trunk GB/token | "
             "expert GB/token | hit % | eff GB/s | eff / device | I/O wait s/token | compute s/token | "
             "CPU s/token | prefill s (32 tok) | prefill / floor | peak RSS GiB | load |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for r in results["rows"]:
        pg = r.get("probe_gbps")
        L.append("| %s (%s) | %s | %.2f | %s | %s | %s | %s | %s | %.3f | %.3f | %s | %s | %s | %.2f | %.2f | %.2f | "
                 "%.1f | %s | %.2f | %s |"
                 % (r["ram"], r["label"],
                    plan_cell(r["plan"]) + (" (auto split; --trunk-ram / --expert-ram differ)"
                                            if r.get("overrides") else ""), r["s_per_token"],
                    fmt(r["io_floor_best"]), fmt(r["ratio_floor"]),
                    "%.2f / %.2f" % (pg["layer"], pg["expert"]) if pg else "-",
                    fmt(r.get("io_floor_adjacent")) if r["bytes_per_token"] else "-",
                    fmt(r.get("ratio_adjacent")) if r["bytes_per_token"] else "-",
                    r["trunk_bytes_per_token"] / GB, r["expert_bytes_per_token"] / GB,
                    fmt(None if r["hit_rate"] is None else 100 * r["hit_rate"], "%.0f"),
                    fmt(r["eff_gbps"]) if r["bytes_per_token"] else "-",
                    fmt(r["ratio_bw"]) if r["bytes_per_token"] else "-",
                    r["io_wait_per_token"], r["compute_per_token"], r["cpu_per_token"],
                    r["prefill_s"], fmt(r["prefill_ratio"]), r["peak_rss_bytes"] / GIB,
                    "%.1f" % r["load"][0]))
    if results.get("compute_floor_s"):
        L.append("")
        L.append("Target ratio, decode s/token / max(I/O floor, compute floor), with the device of "
                 "the run's start / measured next to the rung: " +
                 "; ".join("%s %s / %s" % (r["ram"], fmt(r.get("target_ratio")),
                                          fmt(r.get("target_ratio_adjacent")))
                           for r in results["rows"]) + ".")
        busy = [r for r in results["rows"] if r.get("busy_per_token")]
        if busy:
            L.append("")
            L.append("The disk during decode, as the engine counts it (time with at least one read in "
                     "flight; rung: busy s/token, share of the wall time, mean reads in flight while "
                     "busy, GB/s delivered while busy, s/token / max(busy s/token, compute floor)): " +
                     "; ".join("%s %.3f s, %.0f%%, %.1f, %.2f GB/s, %s" % (
                         r["ram"], r["busy_per_token"], 100 * r["busy_share"], r["inflight_mean"],
                         r["busy_gbps"], fmt(r.get("target_ratio_busy"))) for r in busy) + ".")
        L.append("")
        if results.get("touched_bytes_per_token"):
            L.append("Compute floor (fully resident decode): %.2f s/token = %.1f GB of weights touched "
                     "per token at %.2f GB/s." % (results["compute_floor_s"],
                                                  results["touched_bytes_per_token"] / GB,
                                                  results["compute_gbps"]))
        else:   # a BENCH_BUDGETS ladder without the floor rung: bytes touched unknown
            L.append("Compute floor (fully resident decode): %.2f s/token." % results["compute_floor_s"])
    cc = results.get("crosscheck")
    if cc:
        if "error" in cc:
            L.append("Cross-check with `moestream run --json` failed: %s" % cc["error"])
        else:
            L.append("Cross-check at %s: `moestream run --json` read %d bytes, decodebench %d "
                     "(equal: %s); generated ids equal: %s; its s_per_token %.2f."
                     % (cc.get("ram", "?"), cc["cli_bytes_read"], cc["decodebench_bytes_read"],
                        cc["bytes_equal"], cc["ids_equal"], cc["cli_s_per_token"]))
    L.append("Generated ids identical at every budget: %s." % results.get("ids_identical_across_budgets"))
    faults = [r.get("faults_per_token_steady") for r in results["rows"]]
    if any(f is not None for f in faults):
        L.append("Page faults per decode token after the first (memory first touched during a token): %s."
                 % ", ".join("%s: %s" % (r["ram"], fmt(r.get("faults_per_token_steady"), "%.1f"))
                             for r in results["rows"]))
    mb = results.get("membw", {}).get("best")
    if mb:
        L.append("")
        L.append("Memory read bandwidth (bench/membw, load %s): %.1f GB/s with 1 thread, %.1f GB/s with 2."
                 % (results["membw"]["load_before"], mb["best_1_thread_gbps"], mb["best_2_threads_gbps"]))
        if results.get("compute_gbps"):
            L.append("Fully resident decode streams its weights at %.2f GB/s = %.0f%% of the 2-thread "
                     "memory bandwidth." % (results["compute_gbps"],
                                            100 * results["compute_gbps"] / mb["best_2_threads_gbps"]))
    kr = results.get("kernels", {})
    ks = kernel_summary(kr["text"]) if kr.get("text") else kr.get("summary")
    if ks:
        L.append("")
        L.append("Kernels in the same run (bench/bench_kernels, load %s; its own probes: scalar read "
                 "%.1f / %.1f GB/s with 1 / 2 threads, memcpy %.1f GB/s copied)."
                 % (results["kernels"]["load_before"], ks.get("read_gbps_1", 0), ks.get("read_gbps_2", 0),
                    ks.get("memcpy_gbps", 0)))
        L.append("")
        L.append("| kernel | shape | threads | hot GB/s | cold GB/s | cold / memory bandwidth (same threads) |")
        L.append("|---|---|---:|---:|---:|---:|")
        for key in sorted(k for k in ks if k.startswith(("bf16_", "mxfp4_"))):
            parts = key.split("_")
            if len(parts) != 4:
                continue        # a results.json from before shapes were kept apart
            kind, isa, shape, nt = parts
            v = ks[key]
            bwn = mb.get("best_%s_thread%s_gbps" % (nt[:-1], "" if nt[:-1] == "1" else "s")) if mb else None
            L.append("| %s %s | %s | %s | %.1f | %.1f | %s |" % (kind, isa, shape, nt[:-1], v["hot"], v["cold"],
                                                          "%.0f%%" % (100 * v["cold"] / bwn) if bwn else ""))
    pr = results.get("projection")
    if pr:
        L.append("")
        L.append("Projection for the real K3 (%s): compute = %.0f GB touched per token / %.2f GB/s "
                 "= %.1f s on this CPU; overlap measured %s (trunk streams) / %s (trunk pinned), against the device next to each rung where it was probed."
                 % (pr["config"], pr["k3_touched_bytes_per_token"] / GB, pr["compute_gbps"], pr["compute_s"],
                    fmt(pr["overlap_trunk_streams"]), fmt(pr["overlap_trunk_pinned"])))
        L.append("")
        L.append("| --ram | drive GB/s | trunk GB/token | expert GB/token | I/O floor s | compute s | "
                 "perfect overlap s | no overlap s | projected s/token | limit |")
        L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for r in pr["rows"]:
            L.append("| %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s |"
                     % (r["ram"], r["drive_gbps"], r["trunk_streamed_bytes"] / GB, r["expert_bytes"] / GB,
                        r["io_floor_s"], r["compute_s"], r["ideal_s"], r["serial_s"],
                        fmt(r["projected_s"], "%.1f"), r["limit"]))
    return "\n".join(L) + "\n"


def svg_plot(results, path):
    rows = results["rows"]
    if not rows:
        return
    W, H = 760, 440
    ml, mr, mt, mb = 70, 80, 50, 70
    pw, ph = W - ml - mr, H - mt - mb
    xs = [parse_size_arg(r["ram"]) / GIB for r in rows]
    x0, x1 = min(xs), max(xs)
    pad = max(0.5, (x1 - x0) * 0.06)
    x0, x1 = x0 - pad, x1 + pad
    smax = max(max(r["s_per_token"] for r in rows),
               max(r["io_floor_best"] + (results.get("compute_floor_s") or 0) for r in rows))
    bmax = max(r["bytes_per_token"] for r in rows) / GB

    def nice(v):
        if v <= 0:
            return 1.0
        e = 10 ** math.floor(math.log10(v))
        for m in (1, 2, 2.5, 5, 10):
            if m * e >= v:
                return m * e
        return 10 * e
    stop, btop = nice(smax * 1.1), nice(max(bmax, 0.1) * 1.1)

    def X(v):
        return ml + (v - x0) / (x1 - x0) * pw

    def YS(v):
        return mt + ph - v / stop * ph

    def YB(v):
        return mt + ph - v / btop * ph
    o = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
         'font-family="sans-serif" font-size="12">' % (W, H, W, H),
         '<rect width="100%" height="100%" fill="white"/>',
         '<text x="%d" y="22" font-size="15" text-anchor="middle">moestream decode across the RAM '
         'budget ladder (%s)</text>' % (W // 2, os.path.basename(MODEL)),
         '<text x="%d" y="38" font-size="11" text-anchor="middle" fill="#555">%s, commit %s; '
         'prompt %d tokens, %d decode tokens per budget</text>'
         % (W // 2, results["machine"].get("date", "")[:10], results["machine"].get("commit", "?")[:10],
            CFG["prompt_len"], rows[0].get("decode_tokens", CFG["gen"] - 1))]
    # grid + left axis (s/token)
    for i in range(6):
        v = stop * i / 5
        y = YS(v)
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e5e5e5"/>' % (ml, y, ml + pw, y))
        o.append('<text x="%d" y="%.1f" text-anchor="end" fill="#1f4e9c">%g</text>' % (ml - 6, y + 4, round(v, 3)))
        vb = btop * i / 5
        o.append('<text x="%d" y="%.1f" text-anchor="start" fill="#a0522d">%g</text>'
                 % (ml + pw + 6, YB(vb) + 4, round(vb, 3)))
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, mt, ml, mt + ph))
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml, mt + ph, ml + pw, mt + ph))
    o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>' % (ml + pw, mt, ml + pw, mt + ph))
    o.append('<text transform="translate(18,%d) rotate(-90)" text-anchor="middle" fill="#1f4e9c">'
             'seconds per decode token</text>' % (mt + ph // 2))
    o.append('<text transform="translate(%d,%d) rotate(90)" text-anchor="middle" fill="#a0522d">'
             'GB read per decode token</text>' % (W - 22, mt + ph // 2))
    o.append('<text x="%d" y="%d" text-anchor="middle">RAM budget, GiB (--ram)</text>'
             % (ml + pw // 2, H - 18))
    # bars: bytes per token, trunk + experts stacked
    bw = max(8.0, min(28.0, pw / (len(rows) * 3.0)))
    for r, x in zip(rows, xs):
        t, e = r["trunk_bytes_per_token"] / GB, r["expert_bytes_per_token"] / GB
        cx = X(x)
        o.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#f3c89b"/>'
                 % (cx - bw / 2, YB(t), bw, YB(0) - YB(t)))
        o.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#c8874a"/>'
                 % (cx - bw / 2, YB(t + e), bw, YB(t) - YB(t + e)))
        o.append('<text x="%.1f" y="%d" text-anchor="middle">%.2f</text>' % (cx, mt + ph + 16, x))
        o.append('<text x="%.1f" y="%d" text-anchor="middle" font-size="10" fill="#555">%s</text>'
                 % (cx, mt + ph + 30, r["label"]))

    def polyline(vals, color, dash=""):
        pts = " ".join("%.1f,%.1f" % (X(x), YS(v)) for x, v in zip(xs, vals))
        return ('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"%s/>'
                % (pts, color, ' stroke-dasharray="%s"' % dash if dash else ""))
    o.append(polyline([r["io_floor_best"] for r in rows], "#777", "6,4"))
    comp = results.get("compute_floor_s")
    if comp:
        o.append(polyline([r["io_floor_best"] + comp for r in rows], "#b0b0b0", "1,3"))
    o.append(polyline([r["s_per_token"] for r in rows], "#1f4e9c"))
    for r, x in zip(rows, xs):
        o.append('<circle cx="%.1f" cy="%.1f" r="4" fill="#1f4e9c"/>' % (X(x), YS(r["s_per_token"])))
        o.append('<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10" fill="#1f4e9c">%.2f</text>'
                 % (X(x), YS(r["s_per_token"]) - 8, r["s_per_token"]))
    if comp:
        y = YS(comp)
        o.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#2e8b57" stroke-dasharray="2,3" '
                 'stroke-width="1.5"/>' % (ml, y, ml + pw, y))
    # legend
    lx, ly = ml + pw - 250, mt + 8
    items = [("line", "#1f4e9c", "", "decode s/token (measured)"),
             ("line", "#777", "6,4", "I/O floor: bytes / device GB/s"),
             ("line", "#2e8b57", "2,3", "compute floor (fully resident)"),
             ("line", "#b0b0b0", "1,3", "I/O floor + compute (no overlap)"),
             ("rect", "#f3c89b", "", "trunk GB/token"),
             ("rect", "#c8874a", "", "expert GB/token")]
    o.append('<rect x="%d" y="%d" width="245" height="%d" fill="white" fill-opacity="0.85" stroke="#ccc"/>'
             % (lx - 5, ly - 4, 18 * len(items) + 4))
    for i, (kind, color, dash, text) in enumerate(items):
        y = ly + 10 + 18 * i
        if kind == "line":
            o.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"%s/>'
                     % (lx, y, lx + 24, y, color, ' stroke-dasharray="%s"' % dash if dash else ""))
        else:
            o.append('<rect x="%d" y="%d" width="24" height="10" fill="%s"/>' % (lx, y - 5, color))
        o.append('<text x="%d" y="%d">%s</text>' % (lx + 30, y + 4, text))
    o.append("</svg>")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("\n".join(o) + "\n")


def write_outputs(results):
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    md = markdown(results)
    with open(os.path.join(OUT, "results.md"), "w") as f:
        f.write(md)
    svg_plot(results, SVG)
    print(md)
    log("wrote %s, %s, %s" % (os.path.join(OUT, "results.json"), os.path.join(OUT, "results.md"), SVG))


# ---------------------------------------------------------------------------

def need(path):
    if not os.access(path, os.X_OK):
        raise SystemExit("bench: %s is missing (run through `make bench`)" % path)


def main(argv):
    mode = argv[0] if argv else "all"
    if mode == "render":
        with open(os.path.join(OUT, "results.json")) as f:
            results = json.load(f)
        CFG.update({k: v for k, v in results["config"].items() if k in CFG})
        derive(results)
        results["projection"] = projection(results)
        write_outputs(results)
        return 0
    for p in (MOESTREAM, DEVBENCH) + ((DECODEBENCH,) if mode == "all" else ()):
        need(p)
    t_start = time.time()
    results = {"config": dict(CFG), "model_dir": os.path.relpath(MODEL, ROOT)}
    results["model"] = ensure_model()
    if CFG["pack"]:
        results["pack"] = ensure_pack()
    results["machine"] = machine_info()
    results["layout"] = checkpoint_layout()
    results["device"] = run_device(results["layout"])
    if mode == "device":
        print(device_table(results["device"]))
        return 0
    need(MEMBW)
    before = load()
    lines = [json.loads(x) for x in sh([MEMBW]).stdout.splitlines() if x.startswith("{")]
    results["membw"] = {"rows": lines[:-1], "best": lines[-1], "load_before": before}
    log("memory read bandwidth %.1f GB/s (1 thread) / %.1f (2), load %s"
        % (lines[-1]["best_1_thread_gbps"], lines[-1]["best_2_threads_gbps"], before))
    if env("BENCH_KERNELS", "0" if QUICK else "1") != "0":
        need(KERNELBENCH)
        before = load()
        k = sh([KERNELBENCH]).stdout
        results["kernels"] = {"text": k, "load_before": before, "summary": kernel_summary(k)}
    rungs = derive_ladder()
    mem_avail = results["machine"].get("mem_available_bytes", 0)
    ladder = []
    for rung in rungs:
        rung["plan"] = plan(MODEL, rung["ram"])
        ram = parse_size_arg(rung["ram"])
        if mem_avail and ram > mem_avail - (512 << 20):
            log("skipping %s: more than the %.1f GiB available" % (rung["ram"], mem_avail / GIB))
            rung["skipped"] = "exceeds MemAvailable"
            ladder.append(rung)
            continue
        log("budget %s (%s): %s" % (rung["ram"], rung["label"], plan_cell(rung["plan"])))
        rung["probe_before"] = probe_device(results["layout"])
        rung["result"] = run_rung(rung)
        rung["probe_after"] = probe_device(results["layout"])
        rung["plan"] = plan(MODEL, rung["ram"])   # the budget may have been raised
        res = rung["result"]
        if "decode" in res:
            d = res["decode"]
            log("  decode %.2f s/token, %.3f GB/token, prefill %.1f s, load %s"
                % (d["s"] / max(1, d["tokens"]), (d["trunk_bytes"] + d["expert_bytes"]) / max(1, d["tokens"]) / GB,
                   res["prefill"]["s"], res["load_before"]))
        else:
            log("  failed: %s" % res.get("error"))
        ladder.append(rung)
    results["ladder"] = ladder
    first = next((r for r in ladder if "decode" in r.get("result", {})), None)
    if first is not None and os.environ.get("BENCH_CROSSCHECK", "1") != "0":
        log("cross-check: moestream run --json at %s" % first["ram"])
        results["crosscheck"] = crosscheck(first, first["result"])
        results["crosscheck"]["ram"] = first["ram"]
    if not QUICK:
        # the same device again, engine configurations only: how far it drifted
        log("device again (drift check)")
        results["device_end"] = run_device(results["layout"], ["--buf", "huge", "--backend", CFG["io"]
                                                               if CFG["io"] != "pread" else "direct"])
    results["machine"]["load_at_end"] = load()
    results["elapsed_s"] = round(time.time() - t_start, 1)
    derive(results)
    results["projection"] = projection(results)
    write_outputs(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
