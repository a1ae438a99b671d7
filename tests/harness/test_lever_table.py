"""The lever table (harness/levers.py) round-trips every lever: flag -> RunConfig -> run-name suffix -> the
strategy's keyword arguments -> flags again, and nothing about a lever lives outside the table."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from ddp_profile.harness import bench, levers
from ddp_profile.harness.config import RunConfig, bucket_label
from ddp_profile.harness.strategies import REGISTRY


def on_value(lever: levers.Lever):
    """A value that turns the lever on (not its stock default)."""
    if lever.type is bool:
        return not lever.default
    if lever.choices:
        return next(c for c in lever.choices if c != lever.default)
    return lever.type(2) if lever.type is int else 1.5


def argv_for(lever: levers.Lever) -> list[str]:
    """Command line turning on the lever (and the lever it needs) on a strategy it applies to."""
    strategy = lever.strategies[0]
    argv = ["--strategy", strategy, "--seq-len", "16"]
    for name in ([lever.needs[0]] if lever.needs else []) + [lever.name]:
        other = levers.BY_NAME[name]
        value = on_value(other)
        argv += [other.flag] if other.type is bool else [other.flag, str(value)]
    return argv


def parse(argv: list[str]) -> RunConfig:
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    return bench.config_from_args(p.parse_args(argv))


@pytest.mark.parametrize("lever", levers.LEVERS, ids=[lv.name for lv in levers.LEVERS])
def test_every_lever_round_trips_flag_config_suffix_kwargs(lever):
    cfg = parse(argv_for(lever))
    value = on_value(lever)
    assert getattr(cfg, lever.name) == value and levers.is_on(cfg, lever)
    # the run name carries the suffix (the carveout's scope extends the carveout's part)
    label = bucket_label(cfg)
    part = lever.suffix.format(levers._text(value))
    assert part in label, (label, part)
    assert label.endswith(levers.suffix(cfg)) and len(levers.suffix(cfg)) > 0
    # the strategy gets it, under a parameter its factory names (not swallowed by **kw), iff the table says so
    kwargs = levers.strategy_kwargs(cfg)
    assert (lever.name in kwargs) == lever.to_strategy
    if lever.to_strategy:
        assert kwargs[lever.name] == value
        assert lever.name in inspect.signature(REGISTRY[cfg.strategy]).parameters
    # and the flags the table gives for the config parse back to the same config
    assert parse(["--strategy", cfg.strategy, "--seq-len", "16", *levers.flags(cfg)]) == cfg


def test_the_table_matches_runconfig_and_the_stock_config_has_no_lever_on():
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    stock = RunConfig(seq_len=16)
    for lever in levers.LEVERS:
        assert lever.name in fields, lever.name
        assert fields[lever.name].default == lever.default, lever.name
        assert isinstance(lever.default, lever.type), lever.name
        assert lever.concern in levers.CONCERNS, lever.name
        assert set(lever.strategies) <= set(levers.STRATEGIES), lever.name
        assert not levers.is_on(stock, lever)
    assert levers.suffix(stock) == "" and levers.flags(stock) == []
    names = [lv.name for lv in levers.LEVERS]
    assert len(names) == len(set(names)) and len({lv.flag for lv in levers.LEVERS}) == len(names)


def test_every_flag_of_the_lever_groups_is_a_lever():
    p = argparse.ArgumentParser()
    bench.add_arguments(p)
    in_groups = {
        a.option_strings[0]
        for g in p._action_groups
        if g.title and g.title.startswith("levers")
        for a in g._group_actions
    }
    assert in_groups == {lv.flag for lv in levers.LEVERS}


@pytest.mark.parametrize(
    "lever", [lv for lv in levers.LEVERS if lv.strategies != levers.STRATEGIES], ids=lambda lv: lv.name
)
def test_a_lever_on_a_strategy_outside_its_list_is_refused(lever):
    from ddp_profile.errors import ConfigError

    outside = next(s for s in levers.STRATEGIES if s not in lever.strategies)
    changes = {lever.name: on_value(lever)}
    named = lever.name
    if lever.needs:  # the lever it needs is refused there first, or the lever itself
        changes[lever.needs[0]] = on_value(levers.BY_NAME[lever.needs[0]])
        named = f"{lever.name}|{lever.needs[0]}"
    with pytest.raises(ConfigError, match=f"^({named}) "):
        RunConfig(strategy=outside, seq_len=16, **changes)
