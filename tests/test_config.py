"""Config values from YAML or the command line are turned into each field's declared type."""

from pathlib import Path

import pytest
import yaml

from course_utils.config import PPOConfig, load_config

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "smoke.yaml"


def test_yaml_scientific_notation_without_a_dot_becomes_a_float():
    # PyYAML (YAML 1.1) reads 5e-4 as the string "5e-4": exactly what `--set learning_rate=5e-4` gives.
    raw = yaml.safe_load("5e-4")
    assert isinstance(raw, str)
    config = load_config(SMOKE, learning_rate=raw, kl_coef=0)
    assert config.learning_rate == 0.0005 and isinstance(config.learning_rate, float)
    assert isinstance(config.kl_coef, float)


def test_whole_float_for_an_int_field_is_accepted():
    assert load_config(SMOKE, total_updates=3.0).total_updates == 3


@pytest.mark.parametrize("overrides, message", [
    ({"total_updates": "x"}, "total_updates must be an integer"),
    ({"total_updates": 2.5}, "total_updates must be an integer"),
    ({"whiten_advantages": "yes"}, "whiten_advantages must be true or false"),
    ({"learning_rate": True}, "learning_rate must be a number"),
    ({"lora_target_modules": "q_proj"}, "lora_target_modules must be a list"),
])
def test_values_of_the_wrong_type_get_one_message_naming_the_field(overrides, message):
    with pytest.raises(ValueError, match=message):
        load_config(SMOKE, **overrides)


def test_every_field_annotation_is_a_kind_the_coercion_knows():
    kinds = {f.type for f in PPOConfig.__dataclass_fields__.values()}
    assert kinds <= {"float", "int", "bool", "str", "list", "dict"}, kinds
