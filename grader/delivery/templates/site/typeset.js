// Typesets the math of every page with the KaTeX this site serves (assets/katex/): no CDN, so
// the pages work offline. pymdownx.arithmatex (generic mode) marks each formula up as
// <span class="arithmatex">\(...\)</span> inline or <div class="arithmatex">\[...\]</div> on
// its own line; the delimiters are dropped and the rest handed to katex.render.
// throwOnError false: a formula KaTeX cannot read shows in red (.katex-error), the page keeps
// working, and the site's browser tests look for it.
function typeset(root) {
  for (const element of root.querySelectorAll(".arithmatex")) {
    if (element.querySelector(".katex")) continue; // typeset already
    const tex = element.textContent.trim().slice(2, -2);
    katex.render(tex, element, { displayMode: element.tagName === "DIV", throwOnError: false });
  }
}

// A heading with math also shows in the tables of contents, as plain text that still holds
// the \( ... \) of its formulas: each formula there becomes a typeset span of its own.
function typesetNavigation(root) {
  const inline = /\\\((.+?)\\\)/;
  for (const link of root.querySelectorAll(".md-nav__link")) {
    const walker = document.createTreeWalker(link, NodeFilter.SHOW_TEXT);
    const found = [];
    while (walker.nextNode()) {
      if (inline.test(walker.currentNode.textContent)) found.push(walker.currentNode);
    }
    for (const node of found) {
      // split with a capturing group: text, formula, text, formula, ..., text
      const pieces = node.textContent.split(/\\\((.+?)\\\)/);
      const replacement = pieces.map((piece, index) => {
        if (index % 2 === 0) return document.createTextNode(piece);
        const span = document.createElement("span");
        span.className = "arithmatex";
        katex.render(piece, span, { throwOnError: false });
        return span;
      });
      node.replaceWith(...replacement);
    }
  }
}

// Material for MkDocs announces every page it shows on document$ (also after instant loading).
document$.subscribe(({ body }) => {
  typeset(body);
  typesetNavigation(body);
});
