import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "datasets"))

from dataset_fixtures import built, harvested, token_counter  # noqa: E402,F401  (shared session fixtures)
