"""The stored keys of each family's transformers configuration class (model/data/config_keys.json, which
`train.model_overrides` is checked against without importing transformers) equal what the installed
transformers derives: an upgrade that adds or renames a key is a visible, deliberate change
(`python scripts/config_keys.py` re-derives the file)."""

import json
import sys

from tests.conftest import REPO


def test_the_stored_config_keys_are_the_installed_transformers():
    sys.path.insert(0, str(REPO / "scripts"))
    from config_keys import OUT, derive

    stored = json.loads(OUT.read_text())
    assert stored == derive(), "re-derive with `python scripts/config_keys.py` (and review the change)"


def test_a_key_of_the_family_class_not_in_a_built_in_config_is_an_override():
    """Mistral's sliding_window is not in the built-in config, but its class has it: accepted."""
    from paradvisor.spec.model import family_config_keys

    assert "sliding_window" in family_config_keys()["mistral"]
