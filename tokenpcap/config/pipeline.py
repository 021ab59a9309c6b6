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
is refused here too. Interleaved (virtual) stages and ``pipeline_model_parallel_layout`` are not
modelled.
"""
from __future__ import annotations

__all__ = ["PipelineSplitError", "stage_layer_counts", "stage_first_layers"]


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
