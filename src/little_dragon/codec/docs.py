"""Generated parts of docs/codec.md: the supported-kinds table (from TVM's registry) and the grammar."""
from __future__ import annotations

from little_dragon.codec.folds import FOLDS
from little_dragon.codec.kinds import DERIVED_FORMS_DOC, kinds_table


def kinds_markdown() -> str:
    rows = kinds_table()
    out = ["| TVM kind | pure | mnemonic | meaning |", "|---|---|---|---|"]
    for r in rows:
        mn = f"`{r['mnemonic']}`" if r["mnemonic"] else "—"
        out.append(f"| {r['kind']} | {'yes' if r['pure'] else 'no'} | {mn} | {r['doc']} |")
    return "\n".join(out)


def forms_markdown() -> str:
    """The folded and derived lines (one line for several instructions, or ``*`` for a derived part)."""
    out = ["| line | TVM kinds | meaning |", "|---|---|---|"]
    forms = [(f.form, f"{f.first} + {f.second}", f.doc) for f in FOLDS] + list(DERIVED_FORMS_DOC)
    out += [f"| `{form}` | {kinds} | {doc} |" for form, kinds, doc in forms]
    return "\n".join(out)
