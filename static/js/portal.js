// Small behaviours of the portal's pages, with no inline script (the Content-Security-Policy
// allows scripts from the portal's own origin only). Delegated, so content swapped in by
// htmx behaves the same.
(function () {
  "use strict";
  // "Copy" buttons: <button data-copy="element-id"> copies that element's text.
  document.addEventListener("click", function (event) {
    var button = event.target.closest ? event.target.closest("[data-copy]") : null;
    if (!button) { return; }
    var source = document.getElementById(button.dataset.copy);
    if (!source || !navigator.clipboard) { return; }
    navigator.clipboard.writeText(source.textContent).then(function () {
      button.textContent = "Copied";
    });
  });
  // A refused form's error summary is brought into view and focused, so it is seen and read
  // out first even when the form sits below the fold.
  function focusErrors() {
    var summary = document.querySelector("[data-error-summary]");
    if (summary) { summary.focus(); summary.scrollIntoView({block: "start"}); }
  }
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", focusErrors);
  } else { focusErrors(); }
})();
