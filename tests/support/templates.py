"""Hostile template.yaml texts shared by the template-limit tests."""

HEAD = "runtime: python3.14\nevents:\n  - handler: app.handler\n    pattern: {kind: [a]}\n"


def alias_bomb(under):
    """8 levels of 10 aliases: 10^8 values in about 500 bytes, placed *under* a key."""
    lines = ["l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    lines += [f"l{level}: &l{level} [" + ", ".join([f"*l{level - 1}"] * 10) + "]" for level in range(1, 8)]
    return HEAD + "\n".join(lines) + "\n" + under + "\n"
