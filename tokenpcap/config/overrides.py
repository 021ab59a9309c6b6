"""``--set KEY=VALUE``: a scenario's keys, or those of the model and cluster profiles it names,
changed for one run without editing (or copying) a YAML file.

``KEY`` is the dotted path of the key as a YAML file spells it, from the scenario's top level:

* the scenario's own keys: ``parallelism.dp``, ``training.global_batch_size``,
  ``collectives.channels``, ``generation.clear_to_send``, ``name``;
* the model profile's keys under ``model.``: ``model.layers``, ``model.moe.top_k``;
* the cluster profile's under ``cluster.``: ``cluster.nodes``, ``cluster.fabric.model``,
  ``cluster.gpu.peak_tflops``; a workload scenario's under ``workload.``.

When the scenario names the model or cluster by a path, the keys under ``model.`` or ``cluster.``
change that file's mapping as read (the file is not written); when it holds them inline, the
inline mapping. A mapping on the way that the file does not have is created (``collectives.
channels`` in a scenario without ``collectives:``). ``VALUE`` is parsed as the YAML text after
``key:`` would be (:func:`parse_value`: ``4`` an integer, ``0.4`` a float, ``false`` a bool,
``[0, 1]`` a list, ``queued`` a string), so the value meets the same validators as in the file
and a bad one is refused with the same one-line error, naming ``--set KEY`` in place of the file.

:func:`apply` changes one raw mapping; :func:`using` makes a set of overrides the one every
:func:`tokenpcap.config.profiles.load_scenario` of the running command applies (a context
variable: the command line sets it once, the library functions that take a scenario path
load it as given).
"""
from __future__ import annotations

import contextlib
import contextvars
import copy
from typing import Any, Iterator, Mapping

import yaml

from tokenpcap.errors import ProfileError

__all__ = ["SET_FILE", "parse_set", "parse_value", "value_text", "apply", "split_profile",
           "using", "active", "relabel"]

#: What a ``--set`` error names in place of a file.
SET_FILE = "--set"
#: Scenario keys whose value may be the path of a profile file, the keys under them that file's.
PROFILE_KEYS = ("model", "cluster")

_ACTIVE: contextvars.ContextVar[dict[str, Any]] = contextvars.ContextVar("overrides",
                                                                       default={})


def parse_value(text: str) -> Any:
    """``text`` as the value of a YAML ``key: text`` line (``yaml.SafeLoader``).

    Raises:
        ValueError: not one YAML value (the message says why).
    """
    try:
        return yaml.safe_load(text) if text.strip() else None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem", None) or "not YAML"
        raise ValueError(f"got {text!r}, expected a YAML value ({mark})") from None


def value_text(value: Any) -> str:
    """``value`` written back as the YAML a user types after ``--set KEY=`` (flow style, one
    line): ``true``, ``ring``, ``[0, 3]``, ``{dp: 4}``; :func:`parse_value` reads it back as
    ``value``. A message that names a ``--set`` quotes it so, not as Python's ``True``."""
    text = yaml.safe_dump(value, default_flow_style=True, width=float("inf"))
    return text.removesuffix("\n").removesuffix("\n...").strip()


def parse_set(text: str) -> tuple[str, Any]:
    """``"KEY=VALUE"`` -> ``(KEY, value)`` (:func:`parse_value`); a key is dot-separated
    non-empty names.

    Raises:
        ValueError: no ``=``, an empty key or name, a value that is not YAML.
    """
    key, eq, value = text.partition("=")
    key = key.strip()
    if not eq or not key or any(not part for part in key.split(".")):
        raise ValueError(f"got {text!r}, expected KEY=VALUE with a dotted KEY such as "
                         "parallelism.dp=2")
    return key, parse_value(value)


def split_profile(overrides: Mapping[str, Any], data: Any
                  ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """``overrides`` split into those of the scenario mapping ``data`` itself and, per profile
    key whose value in ``data`` is a path (str), those of that file (keys relative to it).
    ``data`` is the scenario with the ``--set model=PATH`` / ``cluster=PATH`` already applied,
    so the keys under one go to the file it names."""
    own: dict[str, Any] = {}
    sub: dict[str, dict[str, Any]] = {k: {} for k in PROFILE_KEYS}
    for key, value in overrides.items():
        head, _, rest = key.partition(".")
        if rest and head in PROFILE_KEYS and isinstance(data, dict) \
                and isinstance(data.get(head), str):
            sub[head][rest] = value
        else:
            own[key] = value
    return own, sub


def apply(data: Any, overrides: Mapping[str, Any], prefix: str = "") -> Any:
    """A deep copy of the raw mapping ``data`` with each ``KEY: value`` of ``overrides`` set
    (``prefix``: the keys' path above ``data``, for the error).

    Raises:
        ProfileError: ``data`` or a value on a key's path is there and not a mapping
            (file ``--set``).
    """
    if not overrides:
        return data
    out = copy.deepcopy(data) if data is not None else {}
    for key, value in overrides.items():
        names = key.split(".")
        node, path = out, prefix
        for name in names[:-1]:
            if not isinstance(node, dict):
                break
            path = f"{path}.{name}" if path else name
            if node.get(name) is None:
                node[name] = {}
            node = node[name]
        if not isinstance(node, dict):
            raise ProfileError(SET_FILE, f"{prefix}.{key}" if prefix else key, value,
                               f"a key of a mapping ({path or 'the top level'} is "
                               f"{node!r}, not a mapping)")
        node[names[-1]] = value
    return out


def relabel(err: ProfileError, overrides: Mapping[str, Any], prefix: str = "") -> ProfileError:
    """``err`` naming ``--set KEY`` when its key is one of ``overrides`` (or under or above
    one: the mapping a ``--set`` made); when it is another key of the same file, checked
    against an overridden one (``attention_heads`` must divide a ``--set model.hidden_size``),
    ``err`` with the overrides of that file named after what was expected, since the file
    itself does not hold the value the check saw; ``err`` itself without overrides."""
    key = f"{prefix}.{err.key}" if prefix else err.key
    for k in overrides:
        full = f"{prefix}.{k}" if prefix else k
        if key == full or key.startswith(full + ".") or full.startswith(key + "."):
            return ProfileError(SET_FILE, key, err.got, err.expected)
    if not overrides:
        return err
    sets = ", ".join(f"--set {prefix + '.' if prefix else ''}{k}={value_text(v)}"
                     for k, v in overrides.items())
    return ProfileError(err.file, err.key, err.got, f"{err.expected} (with {sets})")


def active() -> dict[str, Any]:
    """The overrides :func:`using` set for the running command (empty outside one)."""
    return _ACTIVE.get()


@contextlib.contextmanager
def using(overrides: Mapping[str, Any]) -> Iterator[None]:
    """Within the block, :func:`active` is ``overrides``."""
    token = _ACTIVE.set(dict(overrides))
    try:
        yield
    finally:
        _ACTIVE.reset(token)
