# The desktop's accessibility tree through AT-SPI (pyatspi), as OSWorld's XML: one element per
# node, named by its role; `name`, `st:*` states, `attr:*` attributes, `cp:screencoord` and
# `cp:size`, the text of text nodes and `val:value`. Run by `orchard-agent desktop` with the
# image's python3: argv[1] is the most nodes to write; argv[2] `showing` keeps only what is on
# screen (nodes in AT-SPI's `showing` state, and the applications that hold them).
import sys
import xml.etree.ElementTree as ET

try:
    import pyatspi
except ImportError as e:
    sys.stderr.write("pyatspi is not importable (the image needs python3-pyatspi): %s\n" % e)
    sys.exit(3)

NS = {
    "st": "https://accessibility.ubuntu.example.org/ns/state",
    "attr": "https://accessibility.ubuntu.example.org/ns/attributes",
    "cp": "https://accessibility.ubuntu.example.org/ns/component",
    "txt": "https://accessibility.ubuntu.example.org/ns/text",
    "val": "https://accessibility.ubuntu.example.org/ns/value",
}
for prefix, uri in NS.items():
    ET.register_namespace(prefix, uri)

MAX_NODES = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
SHOWING_ONLY = len(sys.argv) > 2 and sys.argv[2] == "showing"
MAX_DEPTH = 50
MAX_CHILDREN = 1024
MAX_TEXT = 10000
written = 0
left_out = 0


def q(prefix, name):
    return "{%s}%s" % (NS[prefix], name)


def showing(acc):
    try:
        return acc.getState().contains(pyatspi.STATE_SHOWING)
    except Exception:
        return False


def node(acc, depth):
    global written, left_out
    if SHOWING_ONLY and depth > 1 and not showing(acc):
        return None
    if written >= MAX_NODES:
        left_out += 1
        return None
    written += 1
    try:
        role = acc.getRoleName().replace(" ", "-") or "unknown"
    except Exception:
        role = "unknown"
    el = ET.Element(role)
    try:
        el.set("name", acc.name or "")
    except Exception:
        pass
    try:
        for state in acc.getState().getStates():
            el.set(q("st", pyatspi.stateToString(state).replace(" ", "-")), "true")
    except Exception:
        pass
    try:
        for kv in acc.getAttributes():
            k, _, v = kv.partition(":")
            if k and all(c.isalnum() or c in "-_" for c in k):
                el.set(q("attr", k), v)
    except Exception:
        pass
    try:
        comp = acc.queryComponent()
        x, y = comp.getPosition(pyatspi.XY_SCREEN)
        w, h = comp.getSize()
        el.set(q("cp", "screencoord"), "(%d, %d)" % (x, y))
        el.set(q("cp", "size"), "(%d, %d)" % (w, h))
    except Exception:
        pass
    try:
        text = acc.queryText()
        content = text.getText(0, min(text.characterCount, MAX_TEXT))
        if content:
            el.text = content.replace("\ufffc", "")
    except Exception:
        pass
    try:
        value = acc.queryValue()
        el.set(q("val", "value"), str(value.currentValue))
    except Exception:
        pass
    if depth < MAX_DEPTH:
        try:
            count = min(acc.childCount, MAX_CHILDREN)
        except Exception:
            count = 0
        for i in range(count):
            try:
                child = acc.getChildAtIndex(i)
            except Exception:
                continue
            if child is None:
                continue
            sub = node(child, depth + 1)
            if sub is not None:
                el.append(sub)
    return el


desktop = pyatspi.Registry.getDesktop(0)
root = ET.Element("desktop-frame", {"name": "main"})
for i in range(min(desktop.childCount, MAX_CHILDREN)):
    app = desktop.getChildAtIndex(i)
    if app is None:
        continue
    sub = node(app, 1)
    if sub is not None:
        root.append(sub)
out = ET.tostring(root, encoding="unicode")
if left_out:
    out += "<!-- %d more nodes not shown -->" % left_out
sys.stdout.write(out)
