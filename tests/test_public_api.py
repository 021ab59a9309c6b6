"""The package's public surface, its licence boundary and the README/CI contract."""
from __future__ import annotations

import re
import subprocess
import sys

import tokenpcap
from tests.conftest import ROOT


def test_every_public_name_resolves_and_is_documented():
    for name in tokenpcap.__all__:
        obj = getattr(tokenpcap, name)
        if name != "__version__":
            assert obj.__doc__, f"{name} has no docstring"


def test_unknown_attribute_raises():
    try:
        tokenpcap.no_such_thing  # noqa: B018
    except AttributeError as err:
        assert "no_such_thing" in str(err)
    else:  # pragma: no cover
        raise AssertionError("expected AttributeError")


def test_package_never_imports_gpl_scapy_or_dpkt():
    """scapy is GPL-2.0-only and dpkt writes float times: the package must not import them."""
    code = ("import sys, tokenpcap, pkgutil, importlib\n"
            "for m in pkgutil.walk_packages(tokenpcap.__path__, 'tokenpcap.'):\n"
            "    importlib.import_module(m.name)\n"
            "[getattr(tokenpcap, n) for n in tokenpcap.__all__]\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('scapy', 'dpkt'))\n"
            "print(','.join(bad))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == ""


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", readme, re.S).group(1).strip().splitlines()
    assert len(block) == 2, "the README opens with two commands"
    run_cmd, test_cmd = (line.split("#")[0].strip() for line in block)
    assert "tokenpcap run" in run_cmd
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1].strip() == test_cmd


def test_readme_commands_exist():
    from click.testing import CliRunner

    from tokenpcap.cli import main

    readme = (ROOT / "README.md").read_text()
    named = set(re.findall(r"`tokenpcap (\w+)", readme))
    assert named, "the README names commands"
    for cmd in sorted(named):
        res = CliRunner().invoke(main, [cmd, "--help"])
        assert res.exit_code == 0, f"tokenpcap {cmd}: {res.output}"


def test_readme_abridged_dante_profile_matches_the_real_one():
    """Every key the README shows of dante.yaml has the value the bundled file has."""
    import yaml

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```yaml\n# profiles/scenarios/dante.yaml.*?\n(.*?)```", readme, re.S).group(1)
    shown = yaml.safe_load(block)
    real = yaml.safe_load((ROOT / "profiles" / "scenarios" / "dante.yaml").read_text())

    def subset(a, b, path=""):
        for k, v in a.items():
            assert k in b, f"README shows {path}{k}, the file has no such key"
            if isinstance(v, dict):
                subset(v, b[k], f"{path}{k}.")
            else:
                assert b[k] == v, f"{path}{k}: README {v!r}, file {b[k]!r}"

    subset(shown, real)
