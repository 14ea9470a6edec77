"""The user documentation: every page is listed in the README, every link leads
somewhere, and the pages say what Relay does rather than pointing elsewhere."""

import re

import pytest

from tests.support.relay_process import ROOT

PAGES = sorted((ROOT / "docs").glob("*.md"))
USER_DOCS = [ROOT / "README.md", ROOT / "bench" / "README.md", *PAGES]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6} (.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def prose(path):
    """A page without its code blocks: headings and links inside them do not count."""
    return FENCE.sub("", path.read_text())


def anchors(path):
    """The anchors GitHub gives a page's headings: lowercase, punctuation dropped but
    hyphens and underscores, spaces as hyphens, -1, -2 ... for repeats."""
    seen = {}
    result = set()
    for heading in HEADING.findall(prose(path)):
        text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def relative(path):
    return path.relative_to(ROOT).as_posix()


@pytest.mark.parametrize("page", USER_DOCS, ids=relative)
def test_every_link_leads_to_a_file_and_heading_that_exist(page):
    broken = []
    for target in LINK.findall(prose(page)):
        if re.match(r"[a-z]+:", target):
            continue                                  # https:, mailto:
        file, _, anchor = target.partition("#")
        destination = (page.parent / file).resolve() if file else page
        if not destination.exists():
            broken.append(f"{target}: no {file}")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            broken.append(f"{target}: {relative(destination)} has no heading #{anchor}")
    assert broken == [], f"{relative(page)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", USER_DOCS, ids=relative)
def test_the_docs_say_what_relay_does_not_what_a_reference_says(page):
    """Relay's documentation stands on its own: no "the reference", no "the spec" (code
    blocks aside: a traceback may name a variable spec)."""
    found = re.findall(r"[^.\n]*\b(?:the reference|the reference's|spec)\b[^.\n]*", prose(page), re.IGNORECASE)
    assert found == [], f"{relative(page)}: {found}"


def test_the_readme_lists_every_page_under_docs():
    readme = (ROOT / "README.md").read_text()
    listing = readme.split("More on each part:", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^- \[docs/([\w-]+\.md)\]\(docs/\1\)", listing, re.MULTILINE))
    assert {page.name for page in PAGES} - listed == set()
