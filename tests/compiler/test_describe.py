"""The README's table of stages and passes is the one made from the declared pipelines."""
import os

from spine.compiler.describe import markdown

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_readme_shows_the_pipeline_as_declared():
    with open(os.path.join(ROOT, "README.md")) as f:
        readme = f.read()
    begin = readme.index("<!-- BEGIN python -m spine.compiler.describe")
    begin = readme.index("\n", begin) + 1
    end = readme.index("<!-- END python -m spine.compiler.describe -->")
    assert readme[begin:end] == markdown(), "run `python -m spine.compiler.describe` and paste it into README.md"
