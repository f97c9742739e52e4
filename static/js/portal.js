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
  // Back and forward: htmx puts back the page's markup as it was, whose filter fields still
  // hold what the page was first loaded with, not what was chosen since. Each field of a
  // form that pushes its address is set from the address restored (a field it does not
  // name, or a value no option has, goes back to the field's first-loaded value), so the
  // next change sends what the report shows.
  document.addEventListener("htmx:historyRestore", function () {
    var params = new URLSearchParams(window.location.search);
    document.querySelectorAll("form[hx-push-url]").forEach(function (form) {
      // An address the form pushed names its fields; the first-loaded one may name none.
      var pushed = Array.prototype.some.call(form.elements, function (field) {
        return field.name && params.has(field.name);
      });
      Array.prototype.forEach.call(form.elements, function (field) {
        if (!field.name || field.type === "hidden" || field.type === "submit") { return; }
        var value = params.get(field.name);
        if (field.tagName === "SELECT") {
          var known = value !== null && Array.prototype.some.call(field.options, function (o) {
            return o.value === value;
          });
          Array.prototype.forEach.call(field.options, function (o) {
            o.selected = known ? o.value === value : o.defaultSelected;
          });
        } else if (field.type === "checkbox" || field.type === "radio") {
          field.checked = pushed ? params.getAll(field.name).indexOf(field.value) >= 0
            : field.defaultChecked;
        } else {
          field.value = value !== null ? value : field.defaultValue;
        }
      });
    });
  });
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", focusErrors);
  } else { focusErrors(); }
})();
