"""tshark's -T ek JSON as the capture reader takes it: every key's values in a list, and a
field's values as -T fields prints them."""


def ek_pairs(pairs):
    """json object hook for tshark's -T ek: every key's values in a list, in the order of the
    protocol tree (a field that occurs again under a subtree comes as a repeated key)."""
    out: dict[str, list] = {}
    for k, v in pairs:
        vals = out.setdefault(k, [])
        if isinstance(v, list):
            vals.extend(v)
        else:
            vals.append(v)
    return out


def ek_text(vals):
    """A field's values as -T fields prints them: comma-joined, booleans as 1/0."""
    return ",".join(("1" if x else "0") if isinstance(x, bool) else str(x) for x in vals)
