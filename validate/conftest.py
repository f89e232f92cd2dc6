import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:  # `import validate.measure` also when pytest is not run as python -m
    sys.path.insert(0, ROOT)
