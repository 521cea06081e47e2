"""check_config refuses the right configs but says only "invalid config", never which field."""

# ruff: noqa: F821 - a fragment appended to a solution file, whose names are in scope
# target: flops.py
# select: invalid_configs
# fails: invalid_configs_raise_value_error_naming_the_field
# kind:
# message: raised ValueError without naming

_strict = check_config


def check_config(cfg):
    try:
        _strict(cfg)
    except ValueError:
        raise ValueError("invalid config") from None
