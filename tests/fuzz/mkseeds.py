#!/usr/bin/env python3
"""tests/fuzz/mkseeds.py - writes the committed seed corpora and dictionaries.

Owns: tests/fuzz/corpus/NAME/ (one directory per fuzz target) and
  tests/fuzz/dict/NAME.dict (libFuzzer dictionaries).
Idea: seeds are a few valid inputs in the real layouts (taken from a preset-a
  checkpoint made by tools/msgen.py, so they follow the generator) plus one
  input per refusal the parser has, each small, so the fuzzer starts next to
  every branch. Seed files are named by content (sha1 prefix) like libFuzzer's.
  Rerun by hand after a format change; `make fuzz` never writes here.
Invariants: deterministic output for a given tools/ tree; no seed over 64 KiB.
Does not: run the fuzzers (tests/fuzz/fuzz.mk does).

Usage: /usr/bin/python3 tests/fuzz/mkseeds.py [--out tests/fuzz]
"""

import argparse
import base64
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.dont_write_bytecode = True          # leave no __pycache__ in tools/

MAX_SEED = 64 << 10


def st_file(entries, data=b"", meta=None, pad=True):
    """A shard: entries = {name: (dtype, shape, [b, e])} in the given order."""
    hdr = {}
    if meta is not None:
        hdr["__metadata__"] = meta
    for k, (dt, shape, off) in entries.items():
        hdr[k] = {"dtype": dt, "shape": shape, "data_offsets": off}
    text = json.dumps(hdr, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((-len(text)) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw_st(text, data=b""):
    return struct.pack("<Q", len(text)) + text + data


def preset_a(tmp):
    out = os.path.join(tmp, "a")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "msgen.py"), out, "--preset", "a"],
                   check=True, stderr=subprocess.DEVNULL)
    return out


def seeds_safetensors(model):
    s = {}
    s["small_valid"] = st_file({"a": ("F32", [2, 2], [0, 16]), "b": ("BF16", [3], [16, 22]),
                                "c": ("U8", [0], [22, 22])}, bytes(22), meta={"format": "pt"})
    s["empty_header"] = raw_st(b"{}")
    s["only_metadata"] = raw_st(b'{"__metadata__":{"format":"pt"}}')
    s["scalar"] = st_file({"x": ("F64", [], [0, 8])}, bytes(8))
    s["overlap"] = st_file({"a": ("F32", [2], [0, 8]), "b": ("F32", [2], [4, 12])}, bytes(12))
    s["outside"] = st_file({"a": ("F32", [4], [0, 16])}, bytes(8))
    s["span_mismatch"] = st_file({"a": ("F32", [3], [0, 10])}, bytes(12))
    s["bad_dtype"] = st_file({"a": ("Q4", [2], [0, 2])}, bytes(2))
    s["neg_dim"] = st_file({"a": ("U8", [-1], [0, 1])}, bytes(1))
    s["dim_overflow"] = st_file({"a": ("F32", [4611686018427387904, 4], [0, 0])})
    s["many_dims"] = st_file({"a": ("U8", [1] * 9, [0, 1])}, bytes(1))
    s["dup_key"] = raw_st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
                          b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}', bytes(1))
    s["not_json"] = raw_st(b'{"a":{"dtype":"U8",', bytes(4))
    s["array_top"] = raw_st(b"[1,2,3]")
    s["meta_not_string"] = raw_st(b'{"__metadata__":{"k":1}}')
    s["hlen_huge"] = struct.pack("<Q", 1 << 40) + b"{}"
    s["short"] = b"\x02\x00\x00"
    s["begin_after_end"] = st_file({"a": ("U8", [0], [5, 4])}, bytes(8))
    s["offsets_float"] = raw_st(b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0.0,1]}}', bytes(1))
    # the real layout: the smallest tensors of shard 1, relaid contiguously
    shard = sorted(f for f in os.listdir(model) if f.endswith(".safetensors"))[0]
    with open(os.path.join(model, shard), "rb") as fh:
        raw = fh.read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    small = sorted((k for k in hdr if k != "__metadata__"),
                   key=lambda k: (hdr[k]["data_offsets"][1] - hdr[k]["data_offsets"][0], k))[:24]
    ent, data = {}, b""
    for k in sorted(small, key=lambda k: hdr[k]["data_offsets"][0]):
        b, e = hdr[k]["data_offsets"]
        ent[k] = (hdr[k]["dtype"], hdr[k]["shape"], [len(data), len(data) + e - b])
        data += raw[8 + n + b:8 + n + e]
    s["preset_a_small"] = st_file(ent, data, meta={"format": "pt"})
    return s


def seeds_index(model):
    with open(os.path.join(model, "model.safetensors.index.json")) as fh:
        idx = json.load(fh)
    names = sorted(idx["weight_map"])[:40]
    small = {"metadata": idx["metadata"], "weight_map": {k: idx["weight_map"][k] for k in names}}
    s = {}
    s["preset_a_part"] = json.dumps(small, indent=2).encode()
    s["minimal"] = b'{"weight_map":{"x":"model-00001-of-00001.safetensors"}}'
    s["empty_map"] = b'{"weight_map":{}}'
    s["no_map"] = b'{"metadata":{"total_size":0}}'
    s["map_array"] = b'{"weight_map":[]}'
    s["dotdot"] = b'{"weight_map":{"x":"../etc/passwd"}}'
    s["slash"] = b'{"weight_map":{"x":"a/b.safetensors"}}'
    s["empty_file"] = b'{"weight_map":{"x":""}}'
    s["file_number"] = b'{"weight_map":{"x":1}}'
    s["dup_name"] = b'{"weight_map":{"x":"a.safetensors","x":"b.safetensors"}}'
    s["not_json"] = b'{"weight_map":{"x":"a.safetensors"'
    s["unicode"] = '{"weight_map":{"\u00e9\\u0000x":"a\u4e2d.safetensors"}}'.encode()
    return s


def seeds_config():
    import msgen
    s = {}
    for p in ("a", "b", "c"):
        s["preset_" + p] = json.dumps(msgen.make_config(dict(msgen.PRESETS[p])), indent=1).encode()
    cfg = msgen.make_config(dict(msgen.PRESETS["a"]))
    tc = cfg["text_config"]

    def variant(name, fn):
        c = json.loads(json.dumps(cfg))
        fn(c)
        s[name] = json.dumps(c, separators=(",", ":")).encode()

    variant("hidden_string", lambda c: c["text_config"].__setitem__("hidden_size", "64"))
    variant("no_kv_lora", lambda c: c["text_config"].pop("kv_lora_rank"))
    variant("layers_out_of_range",
            lambda c: c["text_config"]["linear_attn_config"].__setitem__("full_attn_layers", [0, 14, 4]))
    variant("layer_twice",
            lambda c: c["text_config"]["linear_attn_config"]["kda_layers"].append(1))
    variant("quant_missing", lambda c: c["text_config"].pop("quantization_config"))
    variant("bool_as_int", lambda c: c["text_config"].__setitem__("tie_word_embeddings", 0))
    variant("eps_zero", lambda c: c["text_config"].__setitem__("rms_norm_eps", 0))
    variant("flat_layout", lambda c: c.update(c.pop("text_config")))
    # gpt-oss: the released 20b config and a few variants
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "data", "format", "gpt-oss-20b-config.json")) as fh:
        oss = json.load(fh)
    s["oss_20b"] = json.dumps(oss, indent=1).encode()

    def oss_variant(name, fn):
        c = json.loads(json.dumps(oss))
        fn(c)
        s[name] = json.dumps(c, separators=(",", ":")).encode()

    oss_variant("oss_small", lambda c: c.update(num_hidden_layers=2, layer_types=c["layer_types"][:2],
                                                 num_local_experts=4, hidden_size=64, intermediate_size=64,
                                                 vocab_size=300, eos_token_id=10, pad_token_id=11))
    oss_variant("oss_layers_short", lambda c: c["layer_types"].pop())
    oss_variant("oss_no_rope", lambda c: c.pop("rope_scaling"))
    oss_variant("oss_kv_7", lambda c: c.__setitem__("num_key_value_heads", 7))
    s["top_array"] = b"[]"
    s["dup_key"] = b'{"text_config":{"hidden_size":1,"hidden_size":2}}'
    s["not_json"] = b'{"text_config": {'
    assert tc["hidden_size"] == 64
    return s


def fixture_ranks(merges):
    lines = [base64.b64encode(bytes([b])).decode() + " %d" % b for b in range(256)]
    for i, m in enumerate(merges):
        lines.append(base64.b64encode(m).decode() + " %d" % (256 + i))
    return ("\n".join(lines) + "\n").encode()


def tok_config(first_id, names):
    d = {"added_tokens_decoder": {str(first_id + i): {"content": n, "special": True}
                                  for i, n in enumerate(names)}}
    return json.dumps(d).encode()


MARK = b"\n#CONFIG#\n"
SPECIALS = ["[BOS]", "[EOS]", "<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"]


def seeds_tok_load():
    merges = [b"th", b"he", b"the", b" the", b"in", b"ing", b"  ", b"\n\n", b"\xc3\xa9", b"12"]
    r = fixture_ranks(merges)
    n = 256 + len(merges)
    s = {}
    s["with_config"] = r + MARK + tok_config(n, SPECIALS)
    s["no_config"] = r
    s["crlf"] = r.replace(b"\n", b"\r\n") + MARK + tok_config(n, SPECIALS[:2])
    s["shuffled"] = b"\n".join(reversed(r.strip().split(b"\n"))) + b"\n"
    s["missing_byte"] = b"\n".join(l for l in r.split(b"\n") if not l.endswith(b" 65")) + b"\n"
    s["dup_rank"] = r + base64.b64encode(b"xyz") + b" 3\n"
    s["gap_rank"] = r + base64.b64encode(b"xyz") + b" 999\n"
    s["bad_b64"] = r + b"QQ=Q 266\n"
    s["dup_bytes"] = r + base64.b64encode(b"th") + b" 266\n"
    s["special_low_id"] = r + MARK + tok_config(5, ["<|x|>"])
    s["special_empty"] = r + MARK + b'{"added_tokens_decoder":{"%d":{"content":""}}}' % n
    s["special_same_name"] = r + MARK + (b'{"added_tokens_decoder": {"%d": {"content": "<|a|>"}, '
                                         b'"%d": {"content": "<|a|>"}}}' % (n, n + 1))
    s["config_not_json"] = r + MARK + b'{"added_tokens_decoder":'
    s["config_no_decoder"] = r + MARK + b"{}"
    return s


HARMONY = ["<|startoftext|>", "<|endoftext|>", "<|return|>", "<|constrain|>", "<|channel|>", "<|start|>",
           "<|end|>", "<|message|>", "<|call|>"]
O200K_RE = ("[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+"
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+"
            "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*"
            "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def byte_alphabet():
    """GPT-2's byte-to-unicode map: printable Latin-1 bytes stand for themselves."""
    out, extra = {}, 0
    for b in range(256):
        if 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


def hf_tokenizer(merges, names, pattern=O200K_RE, merge_order=None, pre=None, arrays=True):
    """A byte-level tokenizer.json: 256 byte tokens, merges in id order, specials after."""
    al = byte_alphabet()
    key = lambda bs: "".join(al[b] for b in bs)
    vocab = {key(bytes([b])): b for b in range(256)}
    pairs = []
    for i, (a, b) in enumerate(merges):
        vocab[key(a + b)] = 256 + i
        pairs.append([key(a), key(b)] if arrays else key(a) + " " + key(b))
    if merge_order:
        pairs = [pairs[i] for i in merge_order]
    n = 256 + len(merges)
    if pre is None:
        pre = {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    d = {"version": "1.0", "added_tokens": [{"id": n + i, "content": c, "special": True}
                                            for i, c in enumerate(names)],
         "normalizer": None, "pre_tokenizer": pre, "post_processor": None, "decoder": {"type": "ByteLevel"},
         "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                   "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                   "ignore_merges": True, "vocab": vocab, "merges": pairs}}
    return json.dumps(d, ensure_ascii=False).encode()


def seeds_tok_hf():
    m = [(b"h", b"e"), (b"l", b"l"), (b"he", b"ll"), (b" ", b"w"), (b"o", b"r"), (b"\n", b"\n")]
    s = {}
    s["harmony"] = hf_tokenizer(m, HARMONY)
    s["merge_strings"] = hf_tokenizer(m, HARMONY[:3], arrays=False)
    s["gpt2_bytelevel"] = hf_tokenizer(m, [], pre={"type": "ByteLevel", "add_prefix_space": False,
                                                   "use_regex": True})
    s["merges_swapped"] = hf_tokenizer(m, HARMONY, merge_order=[1, 0, 2, 3, 4, 5])
    s["intersection"] = hf_tokenizer(m, HARMONY, pattern="[\\p{L}&&[^\\p{Han}]]+|\\s+")
    s["bad_regex"] = hf_tokenizer(m, HARMONY, pattern="(a|b")
    s["script_name"] = hf_tokenizer(m, HARMONY, pattern="\\p{Han}+|\\p{Greek}+|\\S+|\\s+")
    s["not_json"] = hf_tokenizer(m, HARMONY)[:300]
    return s


def seeds_tok_encode():
    texts = [
        "Hello, world! It's the thing we're testing: 123456 apples.",
        "  leading and trailing spaces   \n\n\tTabs\r\nCRLF",
        "\u4e2d\u6587\u5b57\u7b26\u548cEnglish mixed \u65e5\u672c\u8a9e \ud55c\uad6d\uc5b4",
        "emoji \U0001F600\U0001F469\u200d\U0001F4bb and caf\u00e9 na\u00efve",
        "CamelCaseWordsAndALLCAPS don't can't I'LL",
        "<|open|>message role=\"user\"<|sep|>not special<|close|>",
        "x" * 300 + " " * 300 + "y",
        "def f(x):\n    return x**2  # comment\n",
        "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947",
    ]
    s = {"t%d" % i: t.encode() for i, t in enumerate(texts)}
    s["invalid_utf8"] = b"abc\xff\xfe\xc3(\xe2\x82\xf0\x9f\x98 end \xed\xa0\x80"
    s["nul_bytes"] = b"a\x00b\x00\x00c"
    s["all_bytes"] = bytes(range(256))
    return s


def fixture_n_ranks():
    """256 + the number of merges in fuzz_fixture.h's fz_merges[]."""
    with open(os.path.join(HERE, "fuzz_fixture.h")) as fh:
        text = fh.read()
    body = re.search(r"fz_merges\[\] = \{(.*?)\};", text, re.S).group(1)
    return 256 + len(re.findall(r'"(?:[^"\\]|\\.)*"', body))


def seeds_tok_decode():
    n_ranks = fixture_n_ranks()

    def ids(mode, xs):
        return bytes([mode]) + b"".join(struct.pack("<i", x) for x in xs)
    s = {}
    s["folded_valid"] = ids(0, [2 + i for i in range(0, 300, 7)])
    s["folded_specials"] = ids(0, [2 + n_ranks + k for k in range(8)])
    s["raw_negative"] = ids(1, [65, -1, 66])
    s["raw_past_vocab"] = ids(1, [65, 1 << 30, 66])
    s["raw_valid"] = ids(1, [72, 101, 108, 108, 111])
    s["empty"] = b"\x00"
    return s


def seeds_chat_render():
    FF, FE = b"\xff", b"\xfe"

    def msg(role, content, *parts, reasoning=False, calls=0, index=0):
        h = role | (4 if reasoning else 0) | (calls << 3) | (index << 5)
        return bytes([h]) + FE.join([content] + list(parts))

    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "description":
                        "Weather in a city", "parameters": {"type": "object", "properties":
                        {"city": {"type": "string"}, "days": {"type": "integer"}}}}},
                        {"name": "bare", "parameters": {"x": 0.1}}]).encode()
    s = {}
    s["system_user"] = b"\x08\x01" + FF + FF + msg(0, b"You are helpful.") + FF + msg(1, b"Hi there!")
    s["thinking_high"] = b"\x05\x02" + FF + FF + msg(1, b"Why?") + FF + \
        msg(2, b"Because.", b"let me think", reasoning=True)
    s["tools"] = b"\x08\x02" + FF + tools + FF + msg(1, b"weather in Paris?") + FF + \
        msg(2, b"", b"", b"get_weather", b'{"city": "Paris", "days": 3, "x": [1, 2.5, null, true]}',
            calls=1) + FF + msg(3, b"sunny", b"", b"get_weather", index=0) + FF + msg(1, b"thanks")
    s["bad_args"] = b"\x00\x01" + FF + FF + msg(2, b"ok", b"", b"f", b"not json", b"g", b"[1,2]", calls=2)
    s["blank_args"] = b"\x00\x01" + FF + FF + msg(2, b"ok", b"", b"f", b"  \n ", calls=1)
    s["tools_not_array"] = b"\x00\x00" + FF + b'{"name":"x"}' + FF + msg(1, b"x")
    s["tools_bad_json"] = b"\x00\x00" + FF + b"[{" + FF + msg(1, b"x")
    s["escapes"] = b"\x08\x00" + FF + FF + msg(2, b"", b"", b'to"ol&<x>', b'{"k&\\"": "v\\u0000\\n"}', calls=1)
    s["utf8"] = b"\x09\x03" + FF + FF + msg(1, "\u4e2d\u6587 \U0001F600".encode()) + FF + \
        msg(2, b"caf\xc3\xa9", b"\xff\xfe invalid", reasoning=True)
    s["specials_in_text"] = b"\x08\x01" + FF + FF + msg(1, b"<|open|>message<|sep|><|end_of_msg|>")
    s["empty"] = b""
    return s


def seeds_chat_parse():
    B, E, O, C, S, END, R6, R7 = (bytes([0xF8 + i]) for i in range(8))
    s = {}
    s["response"] = b"\x00Hello there." + O + b"response" + S + O + b"message" + S + C + b"response" + S + \
        C + b"message" + S + END
    s["think_then_response"] = b"\x01I should answer." + C + b"think" + S + O + b"response" + S + b"42" + \
        C + b"response" + S + C + b"message" + S + END
    s["tool_call"] = b"\x00" + C + b"response" + S + O + b"tools" + S + O + b'call tool="get_weather" index="0"' + \
        S + O + b'argument key="city" type="string"' + S + b"Paris" + C + b"argument" + S + \
        O + b'argument key="days" type="number"' + S + b"3" + C + b"argument" + S + C + b"call" + S + \
        C + b"tools" + S + C + b"message" + S + END
    s["json_call"] = b"\x00" + O + b"tools" + S + O + b'call tool="f" index="1"' + S + \
        O + b'json type="array"' + S + b"[1, 2]" + C + b"json" + S + C + b"call" + S
    s["bad_typed_arg"] = b"\x00" + O + b"tools" + S + O + b'call tool="f"' + S + \
        O + b'argument key="n" type="number"' + S + b"not a number" + C + b"argument" + S
    s["truncated_tag"] = b"\x01thinking..." + O + b"resp"
    s["unmatched_close"] = b"\x00text" + C + b"tools" + S + C + b"nothing" + S + b"more" + E + b"after"
    s["reserved_ids"] = b"\x00" + R6 + b"a" + R7 + B + O + S + C + S
    s["escaped_attr"] = b"\x00" + O + b"tools" + S + O + b'call tool="a&quot;b&amp;c" index="x"' + S + C + b"call" + S
    s["empty"] = b"\x00"
    return s


def seeds_chat_json():
    s = {}
    s["tools"] = json.dumps([{"type": "function", "function": {"name": "f", "parameters":
                             {"type": "object", "properties": {"b": {}, "a": {}}}}}]).encode()
    s["floats"] = b"[0.1, 1e16, 1e-05, 100000.0, -0.0, 1.7976931348623157e308, 5e-324, 3.0, 2.5e-7]"
    s["ints"] = b"[0, -1, 9223372036854775807, -9223372036854775808]"
    s["bigint"] = b"[9223372036854775808]"
    s["strings"] = '["\\u0000\\u001f\\b\\f\\n\\r\\t\\"\\\\/", "\u00e9\u4e2d\U0001F600", "\\ud83d\\ude00"]'.encode()
    s["nested"] = b'{"z": {"y": [1, {"b": 2, "a": 1}]}, "a": null, "m": true, "n": false}'
    s["scalar_str"] = b'"just a string"'
    s["scalar_num"] = b"12.5"
    s["dup_keys"] = b'{"a": 1, "a": 2}'
    s["bad"] = b'{"a": [1, 2'
    s["nul_in_key"] = b'{"a\\u0000b": 1}'
    s["deep"] = b"[" * 200 + b"]" * 200
    return s


def preset_oa(tmp):
    """The gpt-oss model of the server target (fuzz.mk: tools/ossgen.py --preset oa)."""
    out = os.path.join(tmp, "oa")
    subprocess.run([sys.executable, os.path.join(ROOT, "tools", "ossgen.py"), out, "--preset", "oa"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return out


def seeds_server_api(oss_dir):
    """Byte 0: 'P' = /v1/completions, 'C' = /v1/chat/completions (K3); 'H' =
    chat, 'Q' = /v1/completions on the gpt-oss model; 'T' / 'U' = /v1/tokenize on
    K3 / gpt-oss, 'D' = /v1/detokenize (K3); then the body."""
    M = "fuzz-model"

    def chat(body):
        return b"C" + json.dumps(body).encode()

    def comp(body):
        return b"P" + json.dumps(body).encode()

    tools = [{"type": "function", "function": {"name": "get_weather", "description": "weather",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"]}}},
             {"type": "function", "function": {"name": "now", "parameters": {}}}]
    s = {}
    s["chat_min"] = chat({"model": M, "messages": [{"role": "user", "content": "Hello"}]})
    s["chat_full"] = chat({
        "model": M, "stream": True, "stream_options": {"include_usage": True},
        "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repetition_penalty": 1.1,
        "seed": 42, "max_tokens": 16, "stop": ["\n\n", "END"], "user": "u1",
        "messages": [{"role": "system", "content": "Be brief."},
                     {"role": "developer", "content": [{"type": "text", "text": "dev note"}]},
                     {"role": "user", "content": "Weather in Paris?"},
                     {"role": "assistant", "content": None, "reasoning_content": "call the tool",
                      "tool_calls": [{"id": "call_1", "type": "function",
                                      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                     {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                     {"role": "user", "content": "thanks"}],
        "tools": tools, "tool_choice": "auto"})
    s["chat_forced_tool"] = chat({"model": M, "messages": [{"role": "user", "content": "x"}], "tools": tools,
                                  "tool_choice": {"type": "function", "function": {"name": "get_weather"}}})
    s["chat_forced_noargs"] = chat({"model": M, "messages": [{"role": "user", "content": "time?"}], "tools": tools,
                                    "tool_choice": {"type": "function", "function": {"name": "now"}}})
    s["chat_required"] = chat({"model": M, "messages": [{"role": "user", "content": "x"}], "tools": tools,
                               "tool_choice": "required"})
    s["chat_thinking"] = chat({"model": M, "messages": [{"role": "user", "content": "why"}],
                               "thinking": {"type": "enabled"}, "reasoning_effort": "max"})
    s["chat_template_kwargs"] = chat({"model": M, "messages": [{"role": "user", "content": "why"}],
                                      "chat_template_kwargs": {"enable_thinking": False}})
    s["chat_wrong_model"] = chat({"model": "gpt-4", "messages": []})
    s["chat_bad_types"] = chat({"model": M, "messages": "hi", "temperature": "hot", "max_tokens": -1})
    s["chat_too_long"] = chat({"model": M, "messages": [{"role": "user", "content": "word " * 400}]})
    s["chat_max_tokens_big"] = chat({"model": M, "messages": [{"role": "user", "content": "x"}],
                                     "max_tokens": 1000000})
    s["chat_unknown_tool_id"] = chat({"model": M, "messages": [{"role": "tool", "tool_call_id": "nope",
                                                                "content": "x"}]})
    s["chat_unsupported"] = chat({"model": M, "messages": [{"role": "user", "content": "x"}], "n": 2,
                                  "logprobs": True, "logit_bias": {"1": 2}, "frequency_penalty": 1,
                                  "response_format": {"type": "json_object"}})
    s["completion_text"] = comp({"model": M, "prompt": "Once upon a time", "max_tokens": 8, "echo": True})
    s["completion_ids"] = comp({"model": M, "prompt": [1, 2, 3, 250], "stop": "x"})
    s["completion_nested"] = comp({"model": M, "prompt": [[5, 6]]})
    s["completion_empty"] = comp({"model": M, "prompt": ""})
    s["completion_bad_id"] = comp({"model": M, "prompt": [1, 99999]})
    s["completion_two"] = comp({"model": M, "prompt": ["a", "b"], "suffix": "z", "best_of": 2})
    # 'T' /tokenize on K3, 'U' on gpt-oss, 'D' /detokenize on K3
    s["tokenize_text"] = b"T" + json.dumps({"prompt": "Hello <|open|> world"}).encode()
    s["tokenize_content"] = b"T" + json.dumps({"model": M, "content": "x y"}).encode()
    s["tokenize_chat"] = b"T" + json.dumps({"messages": [{"role": "user", "content": "Weather?"}], "tools": tools,
                                            "thinking": True}).encode()
    s["tokenize_both"] = b"T" + json.dumps({"prompt": "a", "messages": [], "model": "gpt-4"}).encode()
    s["tokenize_oss_chat"] = b"U" + json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hi"}],
                                                "reasoning_effort": "high", "tools": tools}).encode()
    s["detokenize"] = b"D" + json.dumps({"tokens": [1, 2, 3, 250]}).encode()
    s["detokenize_bad"] = b"D" + json.dumps({"tokens": [1, -1, "x"]}).encode()
    s.update(seeds_server_harmony(oss_dir, tools))
    return s


def seeds_server_harmony(oss_dir, tools):
    """gpt-oss requests: tools under every tool_choice, response_format,
    reasoning_effort; logit_bias on " to", "=" and <|end|> makes the target's
    walk through the constraint open calls ("to=" in a header) and close the
    analysis."""
    M = "fuzz-model"
    tok = json.load(open(os.path.join(oss_dir, "tokenizer.json")))
    sp = {a["content"]: a["id"] for a in tok["added_tokens"]}
    vocab = tok["model"]["vocab"]
    nudge = {str(vocab["\u0120to"]): 12, str(vocab["="]): 12, str(sp["<|end|>"]): 6}

    def chat(body):
        return b"H" + json.dumps(body).encode()

    more = tools + [{"type": "function", "function": {"name": "get", "parameters": {
        "type": "object", "properties": {"k": {"type": "integer", "minimum": 0}}, "required": ["k"],
        "additionalProperties": False}}}]
    msgs = [{"role": "user", "content": "Weather in Oslo?"}]
    s = {}
    s["oss_chat_min"] = chat({"model": M, "messages": [{"role": "user", "content": "Hello"}]})
    for choice, label in (("auto", "auto"), ("none", "none"), ("required", "required"),
                          ({"type": "function", "function": {"name": "get_weather"}}, "named")):
        s["oss_tools_" + label] = chat({"model": M, "messages": msgs, "tools": more, "tool_choice": choice,
                                        "temperature": 0.9, "seed": 3, "max_tokens": 64, "logit_bias": nudge})
    s["oss_auto_greedy"] = chat({"model": M, "messages": msgs, "tools": tools, "max_tokens": 64,
                                 "logit_bias": nudge, "reasoning_effort": "low"})
    s["oss_json_object"] = chat({"model": M, "messages": msgs, "response_format": {"type": "json_object"},
                                 "max_tokens": 64, "logit_bias": {str(sp["<|end|>"]): 20}})
    s["oss_json_schema"] = chat({
        "model": M, "messages": msgs, "max_tokens": 64, "reasoning_effort": "high", "seed": 1, "temperature": 1,
        "response_format": {"type": "json_schema", "json_schema": {"name": "w", "strict": True, "schema": {
            "type": "object", "properties": {"city": {"type": "string", "enum": ["Oslo", "Lima"]},
                                             "t": {"type": "number"}},
            "required": ["city", "t"], "additionalProperties": False}}}})
    s["oss_json_with_auto"] = chat({"model": M, "messages": msgs, "tools": tools, "tool_choice": "auto",
                                    "response_format": {"type": "json_object"}, "reasoning_effort": "none"})
    s["oss_follow_up"] = chat({"model": M, "tools": tools, "messages": msgs + [
        {"role": "assistant", "content": None, "reasoning_content": "look it up",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "cold"}]})
    s["oss_bad_tool_name"] = chat({"model": M, "messages": msgs, "tool_choice": "auto",
                                   "tools": [{"type": "function", "function": {"name": "get weather"}}]})
    s["oss_completion"] = b"Q" + json.dumps({"model": M, "prompt": "<|start|>assistant", "max_tokens": 4}).encode()
    return s


DICT_SERVER = ['"model"', '"fuzz-model"', '"messages"', '"role"', '"content"', '"system"', '"developer"',
               '"user"', '"assistant"', '"tool"', '"tool_calls"', '"tool_call_id"', '"function"',
               '"arguments"', '"tools"', '"tool_choice"', '"auto"', '"none"', '"required"', '"stream"',
               '"stream_options"', '"include_usage"', '"max_tokens"', '"max_completion_tokens"', '"stop"',
               '"temperature"', '"top_p"', '"top_k"', '"min_p"', '"seed"', '"thinking"', '"enabled"',
               '"reasoning_effort"', '"reasoning_content"', '"chat_template_kwargs"', '"prompt"', '"echo"',
               '"text"', '"type"', '"parameters"', '"name"', '"n"', '"logprobs"', '"response_format"',
               '"json_object"', '"json_schema"', '"schema"', '"logit_bias"', '"to=functions."', '"properties"']

DICT_JSON = ['"{"', '"}"', '"["', '"]"', '":"', '","', '"\\""', '"true"', '"false"', '"null"',
             '"\\\\u0000"', '"1e308"', '"-0.0"', '"9223372036854775808"']
DICT_ST = ['"dtype"', '"shape"', '"data_offsets"', '"__metadata__"', '"F32"', '"BF16"', '"F16"',
           '"U8"', '"I64"', '"F8_E4M3"', '"BOOL"']
DICT_INDEX = ['"weight_map"', '"metadata"', '"total_size"', '".safetensors"', '"../"', '"/"']
DICT_CONFIG = ['"text_config"', '"linear_attn_config"', '"quantization_config"', '"config_groups"',
               '"group_0"', '"weights"', '"group_size"', '"full_attn_layers"', '"kda_layers"',
               '"num_hidden_layers"', '"hidden_size"', '"first_k_dense_replace"', '"num_experts"',
               '"vocab_size"', '"situ"', '"sigmoid"', '"noaux_tc"', '"mxfp4-pack-quantized"']
DICT_TOK = ['"\\x0a"', '"\\x0d\\x0a"', '" "', '"=="', '"="', '"#CONFIG#"', '"added_tokens_decoder"',
            '"content"', '"special"']
DICT_CHAT = ['"\\xff"', '"\\xfe"', '"function"', '"name"', '"parameters"', '"arguments"']
DICT_PARSE = ['"\\xf8"', '"\\xf9"', '"\\xfa"', '"\\xfb"', '"\\xfc"', '"\\xfd"', '"message"',
              '"response"', '"think"', '"tools"', '"call"', '"argument"', '"json"', '" key=\\""',
              '" type=\\""', '" tool=\\""', '" index=\\""', '"&quot;"', '"&amp;"']

DICTS = {
    "safetensors": DICT_JSON + DICT_ST,
    "index": DICT_JSON + DICT_INDEX,
    "config": DICT_JSON + DICT_CONFIG,
    "tok_load": DICT_JSON + DICT_TOK,
    "tok_hf": DICT_JSON + ['"merges"', '"vocab"', '"added_tokens"', '"Regex"', '"\\\\\\\\p{L}"', '"\\xC4\\xA0"'],
    "chat_render": DICT_JSON + DICT_CHAT,
    "chat_parse": DICT_PARSE,
    "chat_json": DICT_JSON,
    "server_api": DICT_JSON + DICT_SERVER,
    "size": ['"K"', '"M"', '"G"', '"T"', '"i"', '"B"', '"KiB"', '"GiB"', '"."', '"e"', '"0x"', '"-"'],
}


def pack_chunks(raw):
    """format/pack.h's encoding of one range (the C encoder's output, for seeds)."""
    out = b""
    for at in range(0, len(raw), 65536):
        c = raw[at:at + 65536]
        n, W = len(c), len(c) // 2
        if n % 2:
            out += struct.pack("<I", 1 << 31) + c
            continue
        exps = [(c[2 * w] >> 7) | (c[2 * w + 1] & 0x7f) << 1 for w in range(W)]
        count = {}
        for e in exps:
            count[e] = count.get(e, 0) + 1
        top = sorted(count, key=lambda e: (-count[e], e))[:15]
        code = {e: k for k, e in enumerate(top)}
        esc = [w for w in range(W) if exps[w] not in code]
        if 16 + W + (W + 1) // 2 + 3 * len(esc) >= n:
            out += struct.pack("<I", 1 << 31) + c
            continue
        sm = bytes((c[2 * w + 1] & 0x80) | (c[2 * w] & 0x7f) for w in range(W))
        nib = bytearray((W + 1) // 2)
        for w in range(W):
            nib[w // 2] |= code.get(exps[w], 15) << (4 * (w & 1))
        tab = bytes(top) + bytes(16 - len(top))
        out += struct.pack("<I", len(esc)) + tab + sm + bytes(nib)
        out += b"".join(struct.pack("<H", w) for w in esc) + bytes(exps[w] for w in esc)
    return out


def seeds_pack():
    import random
    rnd = random.Random(5)

    def gauss_bf16(n_words, sd):
        return b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", rnd.gauss(0, sd)))[0] >> 16)
                        for _ in range(n_words))
    s = {}
    for n in (16, 1000, 20000):
        s["roundtrip_gauss_%d" % n] = b"\x00" + gauss_bf16(n, 0.02)
    s["roundtrip_odd"] = b"\x00" + gauss_bf16(100, 1.0) + b"\x07"
    s["roundtrip_random"] = b"\x02" + bytes(rnd.randrange(256) for _ in range(3000))
    wide = b"".join(struct.pack("<H", struct.unpack("<I", struct.pack("<f", rnd.uniform(1, 2) * 2.0 ** rnd.randrange(-40, 40)))[0] >> 16)
                    for _ in range(2000))
    s["roundtrip_escapes"] = b"\x04" + wide
    # decode: [mode 1] [d0: n_ranges - 1, d1..d3: offsets / 16, d4..d6: lengths / 1024,
    # d7: low byte of every length (1 + 1024 d + d7)] then the image
    one = gauss_bf16(612, 0.02)
    s["decode_one_range"] = bytes([1, 0, 0, 0, 0, 1, 0, 0, 199]) + pack_chunks(one)
    a, b = gauss_bf16(612, 0.02), gauss_bf16(612, 1.0)
    s["decode_two_ranges"] = bytes([1, 1, 3, 5, 0, 1, 1, 0, 199]) + pack_chunks(a) + pack_chunks(b)
    return s


# The file-format targets (fuzz_file.h): [flags] [argument] then edits of the
# template the target makes at startup. Flags bit 0 fixes the outer checksum
# up, bit 1 the inner one. Edits: op byte, operands.
def e_field(k, kind, *rest):
    return bytes([0, k, kind]) + bytes(rest)


def e_value(k, v):
    return bytes([0, k, 0]) + struct.pack("<Q", v & (2**64 - 1))


def e_patch(off, data):
    return bytes([1]) + struct.pack("<I", off)[:3] + bytes([len(data)]) + data


def e_resize(n):
    return bytes([2]) + struct.pack("<I", n)[:3]


def e_insert(off, data):
    return bytes([4]) + struct.pack("<I", off)[:3] + bytes([len(data)]) + data


def e_format(arg):
    return bytes([5, arg])


def seeds_session():
    """Fields: 0 magic, 1 model hash, 2 n_past, 3 n_vocab, 4 kda_S, 5 kda_conv,
    6 n_kda, 7 mla_pos, 8 n_mla, 9 has_logits, 10 sums id, 11 sampled id,
    12-14 ids. Argument bit 0: 0 the fed template, 1 the empty one."""
    fix = b"\x01\x00"
    return {
        "as_saved": fix,
        "empty": b"\x01\x01",
        "fed_then_feed": b"\x05\x04",
        "no_fix_mismatch": b"\x00\x00" + e_patch(200, b"\x01"),
        "format_01": fix + e_patch(7, b"1"),
        "not_a_session": fix + e_patch(0, b"X"),
        "other_model": fix + e_field(1, 1, 1),
        "other_weights": fix + e_field(10, 1, 1),
        "other_sample": fix + e_field(11, 1, 1),
        "dims_vocab": fix + e_field(3, 1, 1),
        "has_logits_2": fix + e_field(9, 2, 2),
        "n_past_negative": fix + e_field(2, 2, 3),
        "n_past_over_context": fix + e_value(2, 65) + e_format(0),
        "n_past_2_62": fix + e_value(2, 1 << 62),
        "n_past_shorter": fix + e_field(2, 1, 0xfe) + e_format(0),
        "n_past_from_empty": b"\x01\x01" + e_value(2, 3) + e_format(0),
        "no_logits": fix + e_value(9, 0) + e_format(0),
        "id_out_of_vocab": fix + e_field(12, 2, 3),
        "id_vocab": fix + e_value(13, 384),
        "truncated_header": fix + e_resize(50),
        "truncated_payload": fix + e_resize(4000),
        "extra_byte": fix + e_insert(0xffffff, b"\x00"),
    }


def seeds_sums():
    """Fields: 0 magic, 1 version, 2 reserved, 3 block bytes, 4 table hash,
    5 n_tensors, 6 n_blocks, 7-14 metadata entries, 15-16 block hashes, 17
    version's low byte, 18-19 the fifth metadata entry (tokenizer.json). FORMAT: 0 to format 1, 1 size from n_blocks, 2
    n_blocks from size. Argument: the tensor whose first block is checked."""
    s = {"as_written": b"\x01\x00", "check_meta": b"\x05\x07", "tensor_9": b"\x01\x09",
         "no_fix_damaged": b"\x00\x00" + e_patch(130, b"\xff"),
         "format_1": b"\x05\x00" + e_format(0),
         "format_1_damaged": b"\x00\x00" + e_format(0),
         "bad_magic": b"\x01\x00" + e_patch(3, b"X"),
         "version_4": b"\x01\x00" + e_value(1, 4),
         "block_bytes": b"\x01\x00" + e_field(3, 3, 1),
         "table_hash": b"\x01\x00" + e_field(4, 1, 1),
         "n_tensors": b"\x01\x00" + e_field(5, 1, 0xff),
         "n_blocks_size": b"\x01\x00" + e_field(6, 1, 1),
         "n_blocks_resized": b"\x01\x00" + e_field(6, 1, 1) + e_format(1),
         "n_blocks_huge": b"\x01\x00" + e_field(6, 2, 3),
         "n_blocks_from_size": b"\x01\x00" + e_resize(200) + e_format(2),
         "meta_changed": b"\x05\x00" + e_field(8, 1, 1),
         "meta_absent": b"\x05\x00" + e_field(11, 2, 3),
         "meta_tokenizer_json": b"\x05\x00" + e_field(18, 1, 1),
         "version_2": b"\x05\x00" + e_value(1, 2),
         "block_hash_0": b"\x01\x00" + e_field(15, 1, 1),
         "truncated": b"\x01\x00" + e_resize(40),
         "extended": b"\x01\x00" + e_insert(0xffffff, b"\x00" * 8)}
    return s


def seeds_packfile():
    """Fields: 0 magic, 1 version, 2 chunk bytes, 3 table hash, 4 sums hash,
    5 n_entries, 6 index offset, 7 index bytes, 8 index hash, 9 header hash;
    10-15 the first entry's n_ranges, pad, image offset, image bytes, shift,
    raw bytes; 16-18 its first range's shard, offset, n_bytes. FORMAT: a copy
    of entry (argument % n_entries) appended to the index. Argument: the
    region used; flags bits 2-3 the decoder."""
    both = 3
    s = {"region_%d" % k: bytes([both | (k % 3) << 2, k]) for k in range(6)}
    s.update({
        "no_fix_header": b"\x00\x00" + e_field(5, 1, 1),
        "index_unfixed": b"\x01\x00" + e_patch(0xffff00, b"\x01"),
        "bad_magic": b"\x03\x00" + e_patch(1, b"X"),
        "version_2": b"\x03\x00" + e_value(1, 2),
        "chunk_bytes": b"\x03\x00" + e_field(2, 3, 1),
        "table_hash": b"\x03\x00" + e_field(3, 1, 1),
        "sums_hash": b"\x03\x00" + e_field(4, 1, 1),
        "n_entries_huge": b"\x03\x00" + e_field(5, 2, 3),
        "n_entries_more": b"\x03\x00" + e_field(5, 1, 1),
        "index_outside": b"\x03\x00" + e_field(6, 1, 1),
        "index_short": b"\x03\x00" + e_field(7, 1, 0xd8),
        "duplicate_entry": b"\x03\x00" + e_format(0),
        "duplicate_entry_3": b"\x03\x00" + e_format(3),
        "n_ranges_0": b"\x03\x00" + e_value(10, 0),
        "n_ranges_big": b"\x03\x00" + e_field(10, 2, 6),
        "image_unaligned": b"\x03\x00" + e_field(12, 1, 1),
        "image_past_index": b"\x03\x00" + e_field(13, 3, 7),
        "shift_unaligned": b"\x03\x00" + e_field(14, 1, 1),
        "shift_over_raw": b"\x03\x00" + e_field(14, 2, 4),
        "raw_bytes": b"\x03\x00" + e_field(15, 1, 1),
        "range_shard": b"\x03\x00" + e_value(16, 99),
        "range_offset": b"\x03\x00" + e_field(17, 2, 8),
        "range_bytes": b"\x03\x00" + e_field(18, 3, 7),
        "image_byte": b"\x03\x00" + e_patch(4200, b"\x55"),
        "truncated": b"\x03\x00" + e_resize(60),
    })
    return s


def seeds_size():
    words = ["8G", "512MiB", "1.5T", "4096", "0", "1KB", "1kib", "64M", "2g", "1TiB", "0.5K", ".5K",
             "-1", "+1", " 1", "1 ", "1e3", "0x10", "1.5", "9e18", "8.9e18", "9223372036854775807",
             "123456789012345", "1KK", "1KiBB", "1iB", "inf", "nan", "", ".", "1.2.3", "7T"]
    return {"w%02d" % i: w.encode() for i, w in enumerate(words)}


def write_corpus(out, name, seeds):
    d = os.path.join(out, "corpus", name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    for label, data in sorted(seeds.items()):
        assert len(data) <= MAX_SEED, (name, label, len(data))
        h = hashlib.sha1(data).hexdigest()[:12]
        with open(os.path.join(d, "%s-%s" % (label, h)), "wb") as fh:
            fh.write(data)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=HERE)
    a = ap.parse_args(argv)
    tmp = tempfile.mkdtemp()
    try:
        model = preset_a(tmp)
        oss = preset_oa(tmp)
        corpora = {
            "safetensors": seeds_safetensors(model),
            "index": seeds_index(model),
            "config": seeds_config(),
            "tok_load": seeds_tok_load(),
            "tok_hf": seeds_tok_hf(),
            "tok_encode": seeds_tok_encode(),
            "tok_decode": seeds_tok_decode(),
            "chat_render": seeds_chat_render(),
            "chat_parse": seeds_chat_parse(),
            "chat_json": seeds_chat_json(),
            "server_api": seeds_server_api(oss),
            "pack": seeds_pack(),
            "session": seeds_session(),
            "sums": seeds_sums(),
            "packfile": seeds_packfile(),
            "size": seeds_size(),
        }
    finally:
        shutil.rmtree(tmp)
    for name, seeds in corpora.items():
        write_corpus(a.out, name, seeds)
    os.makedirs(os.path.join(a.out, "dict"), exist_ok=True)
    for name, words in DICTS.items():
        with open(os.path.join(a.out, "dict", name + ".dict"), "w") as fh:
            fh.write("# libFuzzer dictionary for fuzz_%s (written by mkseeds.py)\n" % name)
            for w in words:
                fh.write(w + "\n")
    print("mkseeds: %d corpora, %d seeds" % (len(corpora), sum(len(v) for v in corpora.values())),
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
