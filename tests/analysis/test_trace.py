"""tokenpcap trace: a verse of the corpus followed to its frames, checked against independent
sources: the tokenizer's own decoder, the packet comments of a generated capture read back with
inspect's reader, tshark's decode of the display filters, and numpy's layout of an (s, b, h)
array for micro batches of several sequences."""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import ROOT, needs_tshark, tshark_path
from tokenpcap.analysis.trace import trace
from tokenpcap.analysis.trace_text import TraceError, find_text
from tokenpcap.config.profiles import load_scenario
from tokenpcap.generate.run import GenerateOptions, Selection, generate
from tokenpcap.pcap.reader import open_capture
from tokenpcap.records import PKT_DATA
from tokenpcap.records.comments import parse_comment
from tokenpcap.tokens import cache_dir

DANTE = ROOT / "profiles" / "scenarios" / "dante.yaml"
VERSE = "Nel mezzo del cammin di nostra vita"


def tiny(tmp: Path, name: str, *, mbs: int = 1, gbs: int = 16, dp: int = 4, pp: int = 2,
         par: str = "", moe: str = "") -> Path:
    """A tiny GPT on 8 single-NIC nodes (every group crosses nodes), utf8 tokens of Dante."""
    path = tmp / f"{name}.yaml"
    path.write_text(
        f"name: {name}\ncorpus: {ROOT / 'samples' / 'divina_commedia.txt'}\ntokenizer: utf8\n"
        "model:\n  name: tiny-gpt\n  source: tests\n  layers: 4\n  hidden_size: 256\n"
        f"  attention_heads: 4\n  vocab_size: 512\n  seq_length: 128\n{moe}"
        f"cluster: {ROOT / 'profiles' / 'clusters' / 'h100-rocev2-8x1.yaml'}\n"
        f"parallelism: {{dp: {dp}, tp: 1, pp: {pp}{par}}}\n"
        f"training: {{micro_batch_size: {mbs}, global_batch_size: {gbs}, precision: bf16, "
        "grad_reduce_dtype: bf16}\ncollectives: {algorithm: ring, channels: 2}\n")
    return path


def capture_frames(out: Path):
    """{(file, frame number): parsed comment} of every data frame of every file, read with
    inspect's reader (tokenpcap.pcap.reader.open_capture)."""
    got = {}
    for f in sorted(out.glob("*.pcapng")):
        with open_capture(f) as cap:
            base = 0
            for batch in cap.batches():
                for i, code in enumerate(batch["comment"].tolist()):
                    c = parse_comment(cap.comments[code]) if code >= 0 else None
                    if c is not None and c["kind"] == PKT_DATA:
                        got[(str(f), base + i + 1)] = c
                base += len(batch)
    return got


@pytest.fixture(scope="module")
def dante_pp(tmp_path_factory):
    """The first verse traced into a pp-only Dante capture (full size, one iteration), with
    the BPE tokenizer trained into a cache of its own."""
    out = tmp_path_factory.mktemp("dante")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TOKENPCAP_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        s = load_scenario(DANTE)
        generate(s, GenerateOptions(out_dir=out, snaplen=128,
                                    selection=Selection(phases=("pp",))))
        yield s, out, trace(s, VERSE, capture=str(out)), cache_dir()


def test_first_verse_tokens_decode_back_with_the_tokenizer(dante_pp):
    from tokenizers import Tokenizer

    s, _, j, cache = dante_pp
    sha = hashlib.sha256(s.corpus.read_bytes()).hexdigest()
    [path] = sorted(cache.glob(f"bpe-{sha[:24]}-*.json"))
    tok = Tokenizer.from_file(str(path))
    ids = j.located.ids
    assert tok.decode(ids).strip() == VERSE
    assert VERSE not in tok.decode(ids[1:]) and VERSE not in tok.decode(ids[:-1])
    assert [tok.decode([i]) for i in ids] == j.located.strings
    assert j.located.exact and j.located.occurrences == 1


def test_first_verse_is_sequence_0_microbatch_0_iteration_0(dante_pp):
    _, _, j, _ = dante_pp
    [h] = j.held
    assert (h.sample, h.microbatch, h.replica, h.iteration, h.index) == (0, 0, 0, 0, 0)
    # DP replica 0: rank 0..3 on stage 0 (node 0), 16..19 on stage 1; SP shard of TP rank 0
    assert h.ranks == [[0, 1, 2, 3], [16, 17, 18, 19]] and h.sp_ranks == [[0], [16]]


def test_named_frames_are_exactly_the_activation_frames_holding_the_tokens(dante_pp):
    _, out, j, _ = dante_pp
    want = set(range(j.located.token_start, j.located.token_end))
    holding = {key for key, c in capture_frames(out).items()
               if c["it"] == 0 and c["tokens"] and
               any(a <= t < b for a, b in c["tokens"] for t in want)}
    named = {(e["file"], n) for e in j.frames for n in e["frames"]}
    # NCCL's rule, from its source (src/enqueue.cc addP2pToPlan): a Simple send of fewer than
    # 8 steps (8 x NCCL_P2P_NET_CHUNKSIZE 128 KiB) goes in chunks of half a step, one network
    # message each. Dante's activation send: s x h / tp x 2 bytes (bf16, sequence parallel) =
    # 1024 x 768 / 4 x 2 = 393,216 B < 1 MiB, so the tokens ride in one 64 KiB message of
    # 64 KiB / 4096 B (pmtu) = 16 packets, forward and backward.
    send_bytes, step_bytes, pmtu_bytes = 1024 * 768 // 4 * 2, 128 << 10, 4096
    chunk_bytes = step_bytes // 4 if send_bytes < step_bytes else \
        step_bytes // 2 if send_bytes < 8 * step_bytes else step_bytes
    assert chunk_bytes == 64 << 10
    assert named == holding and len(named) == 2 * (chunk_bytes // pmtu_bytes)
    frames = capture_frames(out)
    assert all(all(any(a <= t < b for a, b in frames[k]["tokens"]) for t in want) for k in named)
    assert {frames[k]["label"] for k in named} == {"pp/forward/SendRecv", "pp/backward/SendRecv"}
    # the payload frames: the tokens' bytes 4608..15360 of the first 64 KiB chunk: packets 1..3
    assert [len(e["token_frames"]) for e in j.frames] == [3, 3]
    assert all(e["comment_mismatches"] == 0 for e in j.frames)


@needs_tshark
def test_tshark_shows_exactly_the_named_frames_with_the_filters(dante_pp):
    _, _, j, _ = dante_pp
    names = {v: k for k, v in j.nic_names.items()}
    for e in j.frames:
        nic = names[Path(e["file"]).stem.split("_", 1)[1].replace("_", "/")]
        for filt, want in ((j.filters[nic], e["frames"]), (j.token_filters[nic], e["token_frames"])):
            done = subprocess.run([tshark_path(), "-r", e["file"], "-Y", filt, "-T", "fields",
                                   "-e", "frame.number"], capture_output=True, text=True,
                                  timeout=120, check=False)
            assert done.returncode == 0, done.stderr
            assert [int(x) for x in done.stdout.split()] == sorted(want)


def test_micro_batch_of_two_follows_the_s_b_h_layout(tmp_path):
    """b = 2: a PP message (one of 2 channels: half the bytes) holds half the positions of both
    sequences; the comments say so, and numpy's C-order (s, b, h) array agrees."""
    path = tiny(tmp_path, "mb2", mbs=2)
    s = load_scenario(path)
    out = tmp_path / "out"
    out.mkdir()
    res = generate(s, GenerateOptions(out_dir=out, selection=Selection(phases=("pp/forward",))))
    assert res.file_bytes == res.expected_bytes     # the size prediction knows the longer comments
    seq, h, b = 128, 256, 2
    arr = np.broadcast_to((np.arange(b)[None, :, None] * seq + np.arange(seq)[:, None, None]),
                          (seq, b, h)).reshape(-1)
    halves = [sorted(set(arr[:arr.size // 2].tolist())), sorted(set(arr[arr.size // 2:].tolist()))]
    frames = capture_frames(out)
    mb0 = {tuple(c["tokens"]) for c in frames.values() if c["mb"] == 0 and c["it"] == 0
           and c["label"] == "pp/forward/SendRecv" and c["tokens"][0][0] < seq * b}
    got = [sorted(t for a, e in spans for t in range(a, e)) for spans in sorted(mb0)]
    assert got == halves
    assert sorted(mb0) == [((0, 64), (128, 192)), ((64, 128), (192, 256))]
    # tracing text of the second sequence (sample 1) of microbatch 0 finds it there
    text = s.corpus.read_text()[160:180]
    j = trace(s, text, capture=str(out))
    [hd] = j.held
    assert (hd.sample, hd.microbatch, hd.replica, hd.index) == (1, 0, 0, 1)
    named = {(e["file"], n) for e in j.frames for n in e["frames"]}
    assert named and all(any(a <= t < e for a, e in frames[k]["tokens"]
                             for t in range(j.located.token_start, j.located.token_end))
                         for k in named)


def test_ep_alltoall_under_block_routing(tmp_path):
    """ep 2: the tokens in the second half of a sequence are dispatched to the other EP rank
    (and combined back), each MoE layer, forward and backward; the first half stays local."""
    path = tiny(tmp_path, "moe", dp=4, par=", ep: 2", moe="  moe: {experts: 4, top_k: 2}\n")
    s = load_scenario(path)
    out = tmp_path / "out"
    out.mkdir()
    generate(s, GenerateOptions(out_dir=out))
    text = s.corpus.read_text()
    local = trace(s, text[20:40])
    assert not [k for k in local.carriers if k.label.startswith("ep/")]
    far = trace(s, text[85:110], capture=str(out))
    ep = [k for k in far.carriers if k.label.startswith("ep/")]
    # 2 layers per stage x 2 stages x (dispatch, combine) x (forward, backward), per channel
    assert {k.op for k in ep} == {"dispatch", "combine", "combine_grad", "dispatch_grad"}
    assert {(k.rank_src, k.rank_dst) for k in ep if k.op in ("dispatch", "combine_grad")} == \
        {(0, 1), (4, 5)}
    # every packet of every carrying message found once in the capture, at its own frame
    for k in far.carriers:
        if k.on_nic:
            assert len(k.frames) == k.n_packets and min(k.frames) > 0
    assert sum(len(e["frames"]) for e in far.frames) == sum(k.n_packets for k in far.carriers
                                                            if k.on_nic)


def test_find_text_exact_then_whitespace_insensitive():
    corpus = "Nel mezzo del cammin di nostra vita\nmi ritrovai per una selva oscura"
    assert find_text(corpus, "vita\nmi") == (31, 38, True, 1)
    a, b, exact, n = find_text(corpus, "vita   mi  ritrovai")
    assert corpus[a:b] == "vita\nmi ritrovai" and not exact and n == 1
    with pytest.raises(TraceError, match="is not in the corpus"):
        find_text(corpus, "selva selvaggia")
    with pytest.raises(TraceError, match="--occurrence: got 2, expected 1..1"):
        find_text(corpus, "oscura", 2)


def test_absent_text_and_the_dropped_tail_are_one_line_errors():
    s = load_scenario(DANTE)
    with pytest.raises(TraceError, match="not in the corpus"):
        trace(s, "to be or not to be")
    # the last verse of the Paradiso: 149,182 BPE tokens, 9 iterations of 16 x 1024 trained
    with pytest.raises(TraceError) as err:
        trace(s, "l'amor che move il sole e l'altre stelle")
    assert "dropped tail of an epoch" in str(err.value) and "0-147456" in str(err.value)
    assert "\n" not in str(err.value)


def test_a_capture_without_the_iteration_or_at_another_scale_is_refused(tmp_path):
    s = load_scenario(tiny(tmp_path, "later"))
    out = tmp_path / "out"
    out.mkdir()
    generate(s, GenerateOptions(out_dir=out, iterations=2, selection=Selection(
        phases=("pp/forward",), iterations=range(1, 2))))
    text = s.corpus.read_text()[20:40]                   # iteration 0
    with pytest.raises(TraceError, match="provenance iterations: got 1:2, expected iteration 0"):
        trace(s, text, capture=str(out))
    with pytest.raises(TraceError, match="provenance scale: got 1, expected --scale 4"):
        trace(s, text, capture=str(out), scale=4)
    # the second iteration's first sequence (16 sequences of 128 tokens per iteration) is there
    j = trace(s, s.corpus.read_text()[2048 + 10:2048 + 30], capture=str(out))
    assert j.held[0].iteration == 1 and j.frames


def test_a_corpus_that_does_not_fill_a_global_batch_is_traced_at_its_first_read():
    """mixtral-8x7b-ep trains 16 sequences of 32,768 tokens an iteration, more than Dante's
    tokens: training reads the corpus over and over within one iteration (the plan's token
    rule, token index i is corpus token i mod tokens), so the opening verse is in sample 0 of
    iteration 0, and packets on the NICs carry exactly its token indices."""
    s = load_scenario(ROOT / "profiles" / "scenarios" / "mixtral-8x7b-ep.yaml")
    assert s.training.global_batch_size * s.model.seq_length > 149_182
    j = trace(s, "Nel mezzo del cammin", scale=1000)
    assert [(h.sample, h.iteration, h.microbatch, h.replica) for h in j.held] == [(0, 0, 0, 0)]
    assert (j.located.token_start, j.located.token_end) == (3, 7)
    on_nic = [c for c in j.carriers if c.on_nic]
    assert on_nic and all(c.iteration == 0 for c in j.carriers)
    assert all(a < 7 and b > 3 for c in on_nic for a, b in c.tokens)
