"""lockscope's USL fit (analyzer/usl.py) against an independent
implementation on measured curves: the data sets of the R package usl and
the coefficients it prints for them (tests/data/usl, README there).

Tolerance: one unit in the last digit the package prints (twice the
rounding of the printed value), but never tighter than 1e-5 relative: the
package's own output moved in the 6th significant digit when it changed
solver (clients_from_2: alpha 0.0418302 before, 0.0418301 after, commits
bb1aab0 and 540c324), so digits past the 5th say nothing about either fit. The two fits are different least-squares
codes (R: nlsr::nlxb, Marquardt; lockscope: scipy curve_fit, trust region
reflective, bounds alpha, beta >= 0) and may stop at slightly different
points of a flat minimum, but both should agree to the printed digits. The
peak N* is compared with the package's own tolerance (all.equal, 1e-4
relative)."""
import csv
import json
from decimal import Decimal
from pathlib import Path

import pytest

from lockscope.analyzer import usl

HERE = Path(__file__).resolve().parent / "data" / "usl"
PUBLISHED = json.loads((HERE / "published.json").read_text())
CASES = sorted(k for k in PUBLISHED if not k.startswith("_"))


def points(case: dict) -> list[tuple[float, float]]:
    with open(HERE / case["csv"], newline="") as f:
        rows = [(float(r[0]), float(r[1])) for r in list(csv.reader(f))[1:]]
    return rows[:case["rows"]] if case["rows"] else rows


def last_digit(printed: str) -> float:
    """One unit in the last printed digit ('2.773e-02' -> 1e-05), at
    least 1e-5 of the value."""
    unit = float(Decimal(1).scaleb(Decimal(printed).as_tuple().exponent))
    return max(unit, 1e-5 * abs(float(printed)))


def test_the_published_data_sets_are_all_there():
    assert set(CASES) == {"specsdm91", "raytracer", "raytracer_first6", "clients_from_2",
                          "normalized_synthetic"}
    assert len(points(PUBLISHED["raytracer"])) == 11
    assert len(points(PUBLISHED["specsdm91"])) == 7
    assert points(PUBLISHED["clients_from_2"])[0][0] == 2      # no N = 1 point


@pytest.mark.parametrize("name", CASES)
def test_usl_fit_matches_the_published_coefficients(name):
    case = PUBLISHED[name]
    f = usl.fit(points(case))
    for attr, key in (("alpha", "alpha"), ("beta", "beta"), ("lam", "lam")):
        want = case[key]
        assert getattr(f, attr) == pytest.approx(float(want), abs=last_digit(want)), (name, attr)
    if case.get("r2"):
        assert f.r2 == pytest.approx(float(case["r2"]), abs=last_digit(case["r2"]))
    if case.get("peak"):
        assert f.peak_workers == pytest.approx(float(case["peak"]), rel=case["peak_rel"])


def test_specsdm91_peak_is_inside_the_measured_range_and_predictions_match():
    f = usl.fit(points(PUBLISHED["specsdm91"]))
    assert not f.peak_extrapolated                    # 96.5 users, measured up to 216
    # usl 3.0.3 tests/fitted.Rout.save, printed with digits=3
    for n, want in zip((1, 18, 36, 72, 108, 144, 216), (90, 1078, 1541, 1850, 1879, 1822, 1646)):
        assert f.predict(n) == pytest.approx(want, abs=1)
    # tests/summary.Rout.save: "peak: throughput 1884 at load 96.52"
    assert f.peak_throughput == pytest.approx(1884, abs=1)


def test_raytracer_beta_lands_on_the_bound_and_there_is_no_peak():
    """The published fit of all 11 raytracer points has beta = 0: no
    coherency penalty, throughput approaches gamma/alpha (Amdahl) and never
    peaks. lockscope's bounded fit must land on the bound, not on a small
    negative or spurious positive beta, and report no peak."""
    f = usl.fit(points(PUBLISHED["raytracer"]))
    assert 0 <= f.beta < 1e-9
    assert f.peak_workers is None and f.peak_throughput is None
    assert f.lam / f.alpha == pytest.approx(21.8488 / 0.0578, rel=2e-3)   # the Amdahl roof


def test_raytracer_first_six_points_peak_is_an_extrapolation():
    f = usl.fit(points(PUBLISHED["raytracer_first6"]))
    assert f.peak_workers == pytest.approx(24.49, abs=0.01)   # sqrt((1-0.02444)/0.00163)
    assert f.peak_extrapolated                                # measured up to 20


@pytest.mark.parametrize("unit", [1e-9, 1e-6, 1e3, 1e9])
def test_usl_fit_does_not_depend_on_the_throughput_unit(unit):
    """Same curve in other units (ops/hour as ops/s, ops/s as ops/ns...):
    same alpha, beta and peak, lambda in the new unit. Fitted on raw values,
    specsdm91 x 1e-6 stopped on scipy's absolute gradient tolerance at alpha
    0.027720 instead of 0.027728."""
    pts = points(PUBLISHED["specsdm91"])
    ref = usl.fit(pts)
    f = usl.fit([(n, x * unit) for n, x in pts])
    assert f.alpha == pytest.approx(ref.alpha, rel=1e-6)
    assert f.beta == pytest.approx(ref.beta, rel=1e-6)
    assert f.lam == pytest.approx(ref.lam * unit, rel=1e-6)
    assert f.peak_workers == pytest.approx(ref.peak_workers, rel=1e-6)
    assert f.r2 == pytest.approx(ref.r2, abs=1e-9)


# DWOM on tmpfs, 1..16 workers on a 16-CPU machine (lockscope sweep, 2026-11-23):
# one shared file's i_rwsem makes every added worker cost more than it adds
DWOM_16CPU = [(1, 2856035), (2, 2220202), (4, 1441467), (8, 1458214), (12, 1301239), (16, 1339580)]


def test_retrograde_from_one_worker_peaks_at_one_worker():
    """A curve that falls from N = 1 fits alpha > 1; the peak is then the
    1-worker point, said in words (the report crashed on a missing peak)."""
    f = usl.fit(DWOM_16CPU)
    assert f.alpha + f.beta >= 1
    assert f.peak_workers == 1.0 and f.peak_throughput == pytest.approx(f.lam)
    assert f.peak_text("ops/s").startswith("peak at 1 worker")


def test_retrograde_fit_renders_in_the_experiment_page():
    from lockscope.reports import templating
    env = templating.environment()
    src = env.loader.get_source(env, "experiment.html.j2")[0]
    row = next(line for line in src.splitlines() if "predicted peak" in line)
    out = env.from_string("{% set u = fit %}" + row).render(fit=usl.fit(DWOM_16CPU), e={"unit": "ops/s"})
    assert "peak at 1 worker" in out
