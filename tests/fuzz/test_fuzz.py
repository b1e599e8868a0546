"""Differential fuzzing, the short seeded run: random kernels (kernels.py) compiled by Spine for each target
and compared with the reference (reference.py). The long run is bench/fuzz.py."""
import itertools
import warnings
from fractions import Fraction

import numpy as np
import triton.language as tl
from hypothesis import HealthCheck, given, settings
from triton.language.semantic import TritonSemantic

from tests.fuzz import dtypes as D
from tests.fuzz import kernels, runner

EXAMPLES = 20

# Failures whose fix lies outside the conversion, reported with a minimal kernel (bench/RESULTS.md,
# "Differential fuzzing"). Matched by target and a distinctive part of the failure; delete an entry once
# its fix lands, and the run checks those kernels again.
KNOWN_ISSUES: list[tuple[str, str, str]] = []


def known_issue(target: str, outcome: runner.Outcome):
    for issue_target, signature, why in KNOWN_ISSUES:
        if issue_target == target and outcome.status in ("failed", "emulator_abort") and signature in outcome.detail:
            return why
    return None


@settings(max_examples=EXAMPLES, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(program=kernels.programs(small=True))
def test_random_kernels_match_the_reference(target, program):
    outcome = runner.run(program)
    why = known_issue(target, outcome)
    if why:
        warnings.warn(f"known issue, not checked: {why}")
        return
    assert outcome.status in ("passed", "rejected"), f"{outcome.status}: {outcome.detail}\n\n{outcome.source}"


def test_promotion_model_matches_triton():
    """The generator's dtype model agrees with triton's own promotion for every pair of dtypes."""
    semantic = TritonSemantic(builder=None)
    for a, b in itertools.product(D.ALL, repeat=2):
        for a_const, b_const, div in itertools.product([False, True], repeat=3):
            if (a_const and a.kind not in ("int", "float")) or (b_const and b.kind not in ("int", "float")):
                continue              # literals are int32 or fp32
            try:
                expected = semantic.computation_type_impl(getattr(tl, a.name), a_const, getattr(tl, b.name),
                                                          b_const, div)
            except TypeError:
                continue              # triton refuses the pair; the generator never builds it
            assert getattr(tl, D.promote(a, b, a_const, b_const, div).name) == expected, (a, b, a_const, b_const, div)


def _nearest_even(q: Fraction, dt) -> float:
    """Round an exact rational to the float format `dt`, from the definition."""
    if q == 0:
        return 0.0
    sign, q = (-1 if q < 0 else 1), abs(q)
    exponent = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** exponent > q:
        exponent -= 1
    emin = D.FLOAT_FORMATS[dt.name][1]
    ulp = Fraction(2) ** (max(exponent, emin) - dt.mantissa + 1)
    units, rest = divmod(q / ulp, 1)
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and units % 2):
        units += 1
    value = units * ulp
    return sign * (float("inf") if value > dt.max_finite else float(value))


def test_reference_rounding_is_correct():
    """round_to (numpy and torch conversions, through rounding to odd) agrees with the definition."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(300) * 2.0 ** rng.integers(-150, 130, 300)
    # just off the half-way points of bf16 and fp16, where rounding through fp32 would round twice
    x[:4] = [1 + 2 ** -8 + 2 ** -40, 1 + 2 ** -11 + 2 ** -40, -(1 + 3 * 2 ** -9 + 2 ** -50), 1 + 2 ** -9]
    for dt in (D.F16, D.BF16, D.F32):
        got = D.round_to(x, dt)
        assert [float(v) for v in got] == [_nearest_even(Fraction(float(v)), dt) for v in x], dt
