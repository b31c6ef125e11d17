// Copy buttons: <button data-copy="#selector"> copies that element's text.
document.querySelectorAll("[data-copy]").forEach(function (b) {
  b.addEventListener("click", function () {
    const text = document.querySelector(b.dataset.copy).textContent;
    navigator.clipboard.writeText(text).then(function () { b.textContent = "Copied"; });
  });
});
