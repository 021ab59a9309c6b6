"""How Megatron-core splits the transformer layers over the pipeline stages.

Three ways, Megatron's own options (``megatron/core/transformer/transformer_config.py``,
``TransformerConfig``; command line ``--decoder-first-pipeline-num-layers``,
``--decoder-last-pipeline-num-layers``, ``--account-for-embedding-in-pipeline-split``,
``--account-for-loss-in-pipeline-split``):

* even (the default): ``layers / pp`` on every stage; ``pp`` must divide ``layers``;
* uneven first/last stage (``num_layers_in_first_pipeline_stage`` /
  ``num_layers_in_last_pipeline_stage``): the first (last) stage holds the given number, the
  ``layers - first - last`` others are spread evenly over the middle stages, which must divide
  them; both must be > 0; there are middle layers exactly when there are middle stages
  (``TransformerConfig.__post_init__``: "Mismatch: ... middle layers remaining but ... middle PP
  stages available"; ``transformer_block.get_num_layers_to_build``);
* the embedding (loss) counted as one layer (``account_for_embedding_in_pipeline_split``,
  ``account_for_loss_in_pipeline_split``): ``pp`` must divide ``layers + 1`` (``+ 2`` with
  both), every stage gets the quotient and the first (last) stage builds one layer fewer
  (``get_num_layers_to_build``); these cannot be combined with an uneven first/last stage.

Stage ``st`` holds the consecutive layers after those of the stages before it
(``transformer_layer.get_transformer_layer_offset``). Megatron lets a stage of the
embedding-counted split build no layer at all; the plan needs at least one per stage, so that
is refused here too.

With the interleaved schedule (``virtual_pipeline_model_parallel_size v``) each stage holds ``v``
model chunks and the model's layers run over the *virtual* stages in the order chunk 0 of
stages 0..pp-1, then chunk 1 of stages 0..pp-1, and so on; :func:`chunk_layer_counts` gives
each chunk's layers by the same three ways, per virtual stage (``get_num_layers_to_build`` and
``get_transformer_layer_offset`` with ``vp_stage``):

* even: ``layers / (pp*v)`` per chunk;
* uneven first/last stage: each chunk of the first (last) stage holds ``first / v``
  (``last / v``), each chunk of a middle stage ``middle layers / (middle stages * v)``; Megatron
  asserts the divisions are exact ("number of layers at first stage ... must be divisible by
  virtual pipeline parallel degree");
* the embedding (loss) counted as a layer: ``(layers + 1 [+ 1]) / (pp*v)`` per chunk, the first
  virtual stage (chunk 0 of stage 0) building one fewer for the embedding, the last (chunk
  ``v-1`` of stage ``pp-1``) one fewer for the loss. Llama 3's 126 layers on 16 stages so
  (Llama Team 2024, Sec. 3.3.2: "we reduce one Transformer layer each from the first and the
  last stages").

The stages' sums are those of the split without chunks. A chunk without a transformer layer
(Megatron allows one that holds only the embedding or the loss) is refused: the plan keys a
chunk's pipeline transfers by its layers. ``pipeline_model_parallel_layout`` is not modelled.
"""
from __future__ import annotations

__all__ = ["PipelineSplitError", "stage_layer_counts", "stage_first_layers",
           "chunk_layer_counts", "chunk_first_layers"]


class PipelineSplitError(ValueError):
    """A split Megatron-core refuses: ``key`` (a ``parallelism`` key), the value ``got``, what is
    ``expected``; :func:`tokenpcap.config.feasibility.check_feasible` turns it into a one-line
    :class:`~tokenpcap.errors.InfeasiblePlanError` naming the scenario file."""

    def __init__(self, key: str, got: str, expected: str):
        super().__init__(f"{key}: got {got}, expected {expected}")
        self.key, self.got, self.expected = key, got, expected


def stage_layer_counts(layers: int, pp: int, first: int | None = None, last: int | None = None,
                       embedding: bool = False, loss: bool = False) -> tuple[int, ...]:
    """Transformer layers of each of the ``pp`` stages (module docstring for the rule).

    ``first``/``last``: ``decoder_first_pipeline_num_layers`` /
    ``decoder_last_pipeline_num_layers`` (None: not set); ``embedding``/``loss``: the
    ``account_for_*_in_pipeline_split`` switches. 61 layers on pp 16 with first 3 and last 2:
    ``(3, 4, 4, ..., 4, 2)``.

    Raises:
        PipelineSplitError: a split Megatron-core refuses, or a stage without layers.
    """
    if pp < 1 or layers < 1:
        raise PipelineSplitError("pp", f"{pp} with {layers} layers", "pp >= 1 and layers >= 1")
    uneven = first is not None or last is not None
    if uneven and (embedding or loss):
        raise PipelineSplitError(
            "decoder_first_pipeline_num_layers" if first is not None
            else "decoder_last_pipeline_num_layers", str(first if first is not None else last),
            "unset with account_for_embedding/loss_in_pipeline_split (Megatron-core refuses both)")
    if uneven:
        rest, middle = layers, pp
        for key, n in (("decoder_first_pipeline_num_layers", first),
                       ("decoder_last_pipeline_num_layers", last)):
            if n is not None:
                if n <= 0:
                    raise PipelineSplitError(key, str(n), "an integer > 0")
                rest, middle = rest - n, middle - 1
        if middle < 0 or (first is not None and last is not None and pp < 2):
            raise PipelineSplitError("pp", str(pp), "pp >= 2 with both a first and a last "
                                     "stage layer count")
        if rest < 0:
            raise PipelineSplitError("decoder_first_pipeline_num_layers",
                                     f"{first} with decoder_last_pipeline_num_layers {last}",
                                     f"at most {layers} layers on the first and last stage")
        if bool(rest) != bool(middle):
            raise PipelineSplitError("pp", f"{pp} with {rest} layers left for {middle} middle "
                                     "stages", "middle layers exactly when there are middle "
                                     "stages (Megatron-core: 'Mismatch')")
        if middle and rest % middle:
            raise PipelineSplitError("pp", f"{pp}: {rest} middle layers on {middle} middle "
                                     "stages", "middle stages that divide the middle layers")
        each = rest // middle if middle else 0
        counts = [each] * pp
        if first is not None:
            counts[0] = first
        if last is not None:
            counts[-1] = last
    else:
        total = layers + int(embedding) + int(loss)
        if total % pp:
            what = " + 1 (embedding)" * embedding + " + 1 (loss)" * loss
            raise PipelineSplitError("pp", f"{pp} with {layers}{what} = {total} layers" if what
                                     else f"{pp} with {layers} layers",
                                     "a pp that divides them (or decoder_first/"
                                     "last_pipeline_num_layers for an uneven split)")
        counts = [total // pp] * pp
        counts[0] -= int(embedding)
        counts[-1] -= int(loss)
    if min(counts) < 1:
        st = counts.index(min(counts))
        raise PipelineSplitError("pp", f"{pp}: stage {st} holds {counts[st]} layers",
                                 "at least one transformer layer per stage")
    return tuple(counts)


def stage_first_layers(counts: tuple[int, ...]) -> tuple[int, ...]:
    """Global index of each stage's first layer: the running sum of ``counts``
    (``get_transformer_layer_offset``)."""
    out, at = [], 0
    for n in counts:
        out.append(at)
        at += n
    return tuple(out)


def chunk_layer_counts(layers: int, pp: int, vpp: int, first: int | None = None,
                       last: int | None = None, embedding: bool = False,
                       loss: bool = False) -> tuple[tuple[int, ...], ...]:
    """Transformer layers of each model chunk of each stage, ``[stage][chunk]``, for ``vpp``
    chunks per stage (module docstring for the rule; one chunk of :func:`stage_layer_counts`
    with ``vpp`` 1). 126 layers on pp 16, vpp 4, embedding and loss counted:
    ``((1, 2, 2, 2), (2, 2, 2, 2), ..., (2, 2, 2, 1))``.

    Raises:
        PipelineSplitError: a split Megatron-core refuses (the stages' split, or chunks that do
            not divide it), or a model chunk without layers.
    """
    counts = stage_layer_counts(layers, pp, first, last, embedding, loss)
    if vpp < 1:
        raise PipelineSplitError("virtual_pipeline_model_parallel_size", str(vpp),
                                 "an integer >= 1")
    if vpp == 1:
        return tuple((n,) for n in counts)
    key = "virtual_pipeline_model_parallel_size"
    if first is not None or last is not None:
        out = []
        for st, n in enumerate(counts):
            if n % vpp:
                where = ("first" if st == 0 and first is not None else
                         "last" if st == pp - 1 and last is not None else "middle")
                raise PipelineSplitError(key, f"{vpp} with {n} layers on the {where} stage "
                                         f"{st}", "a chunk count that divides every stage's "
                                         "layers (Megatron-core: 'must be divisible by virtual "
                                         "pipeline parallel degree')")
            out.append((n // vpp,) * vpp)
        return tuple(out)
    total = layers + int(embedding) + int(loss)
    if total % (pp * vpp):
        what = " + 1 (embedding)" * embedding + " + 1 (loss)" * loss
        raise PipelineSplitError(key, f"{vpp} with pp {pp} and {layers}{what} = {total} layers"
                                 if what else f"{vpp} with pp {pp} and {layers} layers",
                                 f"pp * virtual_pipeline_model_parallel_size = {pp * vpp} "
                                 "dividing them (equal model chunks)")
    per = total // (pp * vpp)
    grid = [[per] * vpp for _ in range(pp)]
    grid[0][0] -= int(embedding)
    grid[-1][-1] -= int(loss)
    if min(min(r) for r in grid) < 1:
        raise PipelineSplitError(key, f"{vpp}: a model chunk of {per} layer slots holds only "
                                 "the embedding or the loss", "at least one transformer layer "
                                 "per model chunk (a smaller virtual_pipeline_model_parallel_size)")
    return tuple(tuple(r) for r in grid)


def chunk_first_layers(chunks: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """Global index of each chunk's first layer, ``[stage][chunk]``, for
    :func:`chunk_layer_counts`'s ``chunks``: the layers of the virtual stages before it, in the
    model's order (chunk ``c`` of stage ``st`` is virtual stage ``c * pp + st``;
    ``get_transformer_layer_offset`` with ``vp_stage``)."""
    pp, vpp = len(chunks), len(chunks[0]) if chunks else 0
    out = [[0] * vpp for _ in range(pp)]
    at = 0
    for c in range(vpp):
        for st in range(pp):
            out[st][c] = at
            at += chunks[st][c]
    return tuple(tuple(r) for r in out)
