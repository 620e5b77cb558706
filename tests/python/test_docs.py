"""The connector-style example of docs/python.md runs as written."""

import os

HERE = os.path.dirname(os.path.abspath(__file__))


def test_connector_example_in_docs():
    with open(os.path.join(HERE, "..", "..", "docs", "python.md")) as f:
        text = f.read()
    code = text.split("### Connector-style use")[1].split("```python")[1].split("```")[0]
    scope = {}
    exec(compile(code, "docs/python.md", "exec"), scope)  # noqa: S102 - our own docs
    assert scope["hit"].hit_chunks == 4 and scope["hit"].hit_tokens == 1023
    assert scope["codes"] == [0, 0, 0, 0]
    scope["store"].close()
