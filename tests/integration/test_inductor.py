"""torch.compile on CPU tensors through Spine: Inductor with cpu_backend="triton" generates Triton
kernels, which Spine compiles (in Inductor's compile workers too) and runs."""
import torch
import torch._inductor.config as inductor_config


def model(x, y):
    return torch.nn.functional.gelu(x * 2 + y).sum(dim=1) + x.amax(dim=1)


def test_torch_compile_with_triton_cpu_backend(target):
    torch._dynamo.reset()
    x, y = torch.randn(13, 70), torch.randn(13, 70)
    with inductor_config.patch(cpu_backend="triton"):
        compiled = torch.compile(model)
        torch.testing.assert_close(compiled(x, y), model(x, y), rtol=1e-4, atol=1e-4)
    torch._dynamo.reset()
