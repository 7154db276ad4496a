#!/usr/bin/python3
"""bench/oss_ladder.py - the gpt-oss decode ladder of docs/PERFORMANCE.md, section "gpt-oss".

Owns: the run behind `make bench-oss`: it generates (or reuses) the 20b-shaped
  checkpoint (tools/ossgen.py --preset 20b: 24 layers x 32 experts at the
  real widths, ~13.8 GB; or the 120b-shaped one, 65.2 GB), then runs rounds of
  the rungs - the floor, trunk pinned, resident - in turn, so that a slow minute of the disk or the memory
  falls on one run of each rung, not on every run of one. Each streamed run
  sits between two device probes (build/bench/devbench: expert batches and
  layer-sized reads) and each resident run between two samples of the memory
  read rate (build/bench/membw). It prints one JSON line per run and, at the
  end, the section's table: s/token per round, bytes read per token, the
  ratio to the I/O floor of the probes around the run, the ratio to the
  disk's busy time, the guesses; for resident rungs the share of the memory
  rate that the bytes a token touches take.
Idea: counts (bytes, guesses, ids) are exact and the same in every round;
  times are not, so each ratio is formed from numbers taken around the same
  run, and the busy-time ratio (s/token over the time a read was in flight)
  does not depend on the probes at all.

Usage:  /usr/bin/python3 bench/oss_ladder.py [run | render FILE]
  run     (default) measure and print; the JSON lines also go to $OSS_OUT
  render  print the table again from the JSON lines of an earlier run
Exit status: 1 when the runs generated different ids (every rung must give the same).
Environment (all optional):
  BUILD        build directory (default build)
  OSS_PRESET   20b (default) or 120b: the shapes of the checkpoint generated
  OSS_DIR      checkpoint (default $BUILD/bench-oss$OSS_PRESET; generated when it has no
               config.json)
  OSS_BUDGETS  the rungs, a comma list of --ram values (default for the 20b min,3G,16G:
               the floor, trunk pinned and resident; for the 120b min,4G,8G: the floor,
               trunk pinned, and an 8 GB machine's budget, where the cache keeps 363 of the
               4,608 experts); a rung whose plan keeps every expert resident is measured
               against the memory, the rest against the disk
  OSS_ROUNDS   rounds of all the rungs (default 3)
  OSS_GEN      tokens generated per run: at the floor 5, elsewhere 10 unless set
  OSS_OUT      JSON lines (default $BUILD/bench/oss-ladder.jsonl)
Does not: assert timings, or run in `make test`.
"""
import glob
import json
import os
import statistics
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GB = 1e9


def env(name, default):
    v = os.environ.get(name)
    return default if v is None or v == "" else v


BUILD = env("BUILD", "build")
PRESET = env("OSS_PRESET", "20b")
MODEL = env("OSS_DIR", os.path.join(BUILD, "bench-oss" + PRESET))
BUDGETS = env("OSS_BUDGETS", {"20b": "min,3G,16G", "120b": "min,4G,8G"}.get(PRESET, "min")).split(",")
ROUNDS = int(env("OSS_ROUNDS", "3"))
OUT = env("OSS_OUT", os.path.join(BUILD, "bench", "oss-ladder.jsonl"))
# the 32 bench ids of every ladder in docs/PERFORMANCE.md
IDS = ",".join(str(1 + (i * 7919 + 13) % 32766) for i in range(32))
EXPERT_BYTES = "13236480"       # one gpt-oss expert (gate_up + down, blocks + scales + biases)
LAYER_BYTES = "53000000"        # a layer's four experts, read as one span


def bin_path(name):
    return os.path.join(BUILD, "bench", name)


def shards():
    return sorted(glob.glob(os.path.join(MODEL, "*.safetensors")))


def touched_bytes():
    """Bytes a decode token touches: everything but the embedding (one row)
    and the experts (top-k of each layer's, with their biases)."""
    cfg = json.load(open(os.path.join(MODEL, "config.json")))
    n_exp, top_k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    total = 0
    for path in shards():
        with open(path, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
        for name, t in header.items():
            if name == "__metadata__":
                continue
            size = t["data_offsets"][1] - t["data_offsets"][0]
            if name == "model.embed_tokens.weight":
                total += size // t["shape"][0]
            elif ".mlp.experts." in name:
                total += size // n_exp * top_k
            else:
                total += size
    return total


def probe():
    out = subprocess.run([bin_path("devbench"), "--backend", "direct", "--buf", "huge", "--qd", "32",
                          "--expert-bytes", EXPERT_BYTES, "--batch", "4", "--layer-bytes", LAYER_BYTES,
                          "--bytes", "2G"] + shards(), capture_output=True, text=True, check=True).stdout
    rates = {}
    for line in out.strip().splitlines():
        j = json.loads(line)
        rates[j["pattern"]] = round(j["gbps"], 3)
    return rates


def membw():
    out = subprocess.run([bin_path("membw")], capture_output=True, text=True, check=True).stdout
    return round(json.loads(out.strip().splitlines()[-1])["best_2_threads_gbps"], 1)


def resident(ram):
    """Whether the plan at `ram` keeps every expert resident (the memory bounds it)."""
    out = subprocess.run([os.path.join(BUILD, "moestream"), "plan", MODEL, "--ram", ram],
                         capture_output=True, text=True, check=True).stdout
    return "(all resident)" in out


def one_run(rnd, ram, is_res, touched):
    gen = int(env("OSS_GEN", "5" if ram == "min" else "10"))
    before = membw() if is_res else probe()
    proc = subprocess.run([bin_path("decodebench"), MODEL, "--ids", IDS, "--gen", str(gen), "--ram", ram,
                           "--io", "direct", "--queue-depth", "32"], capture_output=True, text=True)
    after = membw() if is_res else probe()
    if proc.returncode != 0:
        sys.exit(f"decodebench at --ram {ram} failed: {proc.stderr.strip()}")
    d = json.loads(proc.stdout)
    toks = d["decode_tokens"]
    per = lambda key: sum(t[key] for t in toks) / len(toks)
    return dict(round=rnd, ram=ram, resident=is_res,
                s_med=round(statistics.median(t["s"] for t in toks), 4),
                busy_med=round(statistics.median(t["io_busy_s"] for t in toks), 4),
                ratio_busy=None if is_res else round(statistics.median(t["s"] / t["io_busy_s"] for t in toks), 3),
                trunk_gb=round(per("trunk_bytes") / GB, 3), expert_gb=round(per("expert_bytes") / GB, 3),
                guesses=[sum(t["guess_issued"] for t in toks), sum(t["guess_hits"] for t in toks)],
                hits=[sum(t["expert_hits"] for t in toks), sum(t["expert_requests"] for t in toks)],
                tokens=len(toks), touched_gb=round(touched / GB, 3), ids=d["generated_ids"],
                before=before, after=after, kernels=d["kernels"],
                load=open("/proc/loadavg").read().split()[:3])


def io_floor(r):
    """s/token the bytes read need at the mean rates of the probes around the run."""
    rate = lambda pat: (r["before"][pat] + r["after"][pat]) / 2
    return r["trunk_gb"] / rate("layer") + r["expert_gb"] / rate("expert")


def hits(rs):
    """Expert cache hits a decode token, and its expert requests (runs before the field: -)."""
    if any("hits" not in r for r in rs):
        return "-"
    tok = sum(r["tokens"] for r in rs)
    return f"{sum(r['hits'][0] for r in rs) / tok:.1f} ({sum(r['hits'][1] for r in rs) / tok:.0f})"


def render(runs):
    lines = ["| --ram | s/token (each round) | read per token (trunk / experts) | ratio to the I/O floor "
             "| against busy time | read rate while busy / the probes', GB/s | guesses a token (right) "
             "| cache hits a token (of) | share of the memory rate |",
             "|---|---|---|---|---|---|---:|---:|---|"]
    fmt = lambda x: f"{x:.4f}" if x < 1 else f"{x:.3f}"
    for ram in dict.fromkeys(r["ram"] for r in runs):
        rs = [r for r in runs if r["ram"] == ram]
        secs = ", ".join(fmt(r["s_med"]) for r in rs)
        read = f"{statistics.mean(r['trunk_gb'] for r in rs):.3f} / {statistics.mean(r['expert_gb'] for r in rs):.3f} GB"
        if rs[0]["resident"]:
            share = ", ".join(f"{r['touched_gb'] / r['s_med'] / ((r['before'] + r['after']) / 2):.2f}" for r in rs)
            lines.append(f"| {ram} | {secs} | {read} | - | - | - | - | {hits(rs)} | {share} |")
            continue
        floor = ", ".join(f"{r['s_med'] / io_floor(r):.2f}" for r in rs)
        busy = ", ".join(f"{r['ratio_busy']:.2f}" for r in rs)
        rate = ", ".join(f"{(r['trunk_gb'] + r['expert_gb']) / r['busy_med']:.2f} / "
                         f"{(r['trunk_gb'] + r['expert_gb']) / io_floor(r):.2f}" for r in rs)
        g = [r["guesses"] for r in rs]
        tok = sum(r["tokens"] for r in rs)
        guess = f"{sum(x[0] for x in g) / tok:.0f} ({sum(x[1] for x in g) / tok:.0f})"
        lines.append(f"| {ram} | {secs} | {read} | {floor} | {busy} | {rate} | {guess} | {hits(rs)} | - |")
    return "\n".join(lines)


def same_ids(runs):
    """Whether every run generated the same ids (over the shortest run's length)."""
    n = min(len(r["ids"]) for r in runs)
    return len({tuple(r["ids"][:n]) for r in runs}) == 1


def report(runs):
    """Print the table; exit 1 when the ids differ between runs (they must not, at any budget)."""
    print(render(runs))
    print()
    if not same_ids(runs):
        sys.exit("the ids DIFFER between runs: " + "; ".join(f"{r['ram']} round {r['round']}: {r['ids']}" for r in runs))
    print("ids identical at every rung and round")


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "run"
    if mode == "render":
        report([json.loads(l) for l in open(sys.argv[2]) if l.strip()])
        return
    if mode != "run":
        sys.exit(__doc__)
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "tools", "ossgen.py"), MODEL, "--preset", PRESET],
                       check=True)
    touched = touched_bytes()
    kinds = {ram: resident(ram) for ram in BUDGETS}
    os.makedirs(os.path.dirname(OUT) or ".", exist_ok=True)
    runs = []
    with open(OUT, "w") as out:
        for rnd in range(1, ROUNDS + 1):
            for ram in BUDGETS:
                r = one_run(rnd, ram, kinds[ram], touched)
                runs.append(r)
                out.write(json.dumps(r) + "\n")
                out.flush()
                print(json.dumps(r), flush=True)
    print()
    report(runs)


if __name__ == "__main__":
    main()
