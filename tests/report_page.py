"""report.html in a real browser (the `chromium` fixture): what the tests of the page ask of it. Every request
the page makes is recorded; the page may load itself and nothing else."""

from __future__ import annotations

from pathlib import Path
from typing import Any


class ReportPage:
    def __init__(self, browser: Any, path: Path, **context: Any) -> None:
        self.uri = path.resolve().as_uri()
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page = browser.new_page(**context)
        self.page.on("request", lambda request: self.requests.append(request.url))
        self.page.on("dialog", lambda dialog: (self.dialogs.append(dialog.message), dialog.dismiss()))
        self.page.goto(self.uri, wait_until="load")

    def close(self) -> None:
        self.page.close()

    def foreign_requests(self) -> list[str]:
        return sorted({url for url in self.requests if url.split("#", 1)[0] != self.uri})

    def text(self) -> str:
        return str(self.page.inner_text("body"))

    def shown_cards(self) -> list[str]:
        """The node ids of the image cards the filters leave visible."""
        return [str(t) for t in self.page.eval_on_selector_all(
            "details.card", "cs => cs.filter(c => !c.hidden).map(c => c.querySelector('.node').textContent)")]

    def choose(self, select: str, value: str) -> None:
        self.page.select_option(f"#f-{select}", value)

    def search(self, text: str) -> None:
        self.page.fill("#f-text", text)

    def shown(self) -> str:
        return str(self.page.inner_text("#shown"))

    def open_from_grid(self, node: str) -> Any:
        """Click the grid cell of `node` (by its status link) and return its card, which the click opens."""
        anchor = self.page.eval_on_selector_all(
            "details.card", "(cs, node) => cs.find(c => c.querySelector('.node').textContent === node).id", node)
        self.page.click(f"td.cell a[href='#{anchor}']")
        card = self.page.locator(f"#{anchor}")
        assert card.get_attribute("open") is not None, f"the card of {node} did not open"
        return card
