"""Moving sessions in and out as Pi's JSONL files: import (byte-exact storage of every line)
and export (the same bytes back, or the v3 form Pi rewrites)."""
