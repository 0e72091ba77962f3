"""csrc/ has no include cycle between its modules (a module is x.h with x.cc or x.cu): each
module's includes point one way, down to what it is built on."""

import pathlib
import re

CSRC = pathlib.Path(__file__).resolve().parents[1] / "csrc"


def module_graph(files: dict) -> dict:
    """{module: modules it includes} from {file name: text}, over the library's own headers."""
    own = {pathlib.Path(name).stem for name in files}
    graph: dict = {}
    for name, text in files.items():
        module = pathlib.Path(name).stem
        for header in re.findall(r'^\s*#include\s+"([^"]+)"', text, re.M):
            target = pathlib.Path(header).stem
            if target in own and target != module and "/" not in header:
                graph.setdefault(module, set()).add(target)
    return graph


def cycle(graph: dict):
    """One include cycle of ``graph`` as a list of modules, or None."""
    state: dict = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_csrc_has_no_include_cycle():
    files = {p.name: p.read_text() for p in CSRC.iterdir() if p.suffix in (".h", ".cc", ".cu")}
    assert "watchdog" in module_graph(files) and "grid" in module_graph(files)
    assert cycle(module_graph(files)) is None, cycle(module_graph(files))


def test_a_cycle_is_found():
    files = {"a.h": '#include "b.h"', "b.cc": '#include "a.h"\n#include "c.h"', "c.h": ""}
    assert cycle(module_graph(files)) == ["a", "b", "a"]
