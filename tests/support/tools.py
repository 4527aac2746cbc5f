"""tools.py — tools with bounded schemas for forced-call tests: a random model
constrained by the call grammar must finish a call of them within a few hundred tokens,
and args_valid checks the arguments by hand (the oracle)."""


SET_MODE = {"type": "function", "function": {
    "name": "set_mode", "description": "Pick a mode",
    "parameters": {"type": "object", "additionalProperties": False,
                   "properties": {"mode": {"enum": ["fast", "slow"]}, "on": {"type": "boolean"},
                                  "n": {"type": "null"}},
                   "required": ["mode", "on"]}}}
TOGGLE = {"type": "function", "function": {
    "name": "toggle", "parameters": {"type": "object", "properties": {
        "flag": {"type": "boolean"}}, "required": ["flag"]}}}


def args_valid(name, args):
    """The two bounded schemas above, checked by hand (the oracle)."""
    if name == "toggle":
        return set(args) == {"flag"} and isinstance(args["flag"], bool)
    return (name == "set_mode" and {"mode", "on"} <= set(args) <= {"mode", "on", "n"}
            and args["mode"] in ("fast", "slow") and isinstance(args["on"], bool)
            and args.get("n") is None)
