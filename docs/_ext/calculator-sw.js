// The calculator page's service worker (docs/_ext/trainmath_calculator.py copies it to the
// site's root; the page registers it for its own URL only). Network first, so a rebuilt site is
// seen at once; every answer is kept, so the page, Pyodide and the trainmath wheel still load
// when the network is gone.
const CACHE = "trainmath-calculator-v1";

self.addEventListener("install", () => self.skipWaiting());
self.addEventListener("activate", (event) => event.waitUntil(self.clients.claim()));

self.addEventListener("fetch", (event) => {
  const request = event.request;
  if (request.method !== "GET" || new URL(request.url).origin !== location.origin) return;
  event.respondWith((async () => {
    const cache = await caches.open(CACHE);
    try {
      const response = await fetch(request);
      if (response.ok) await cache.put(request, response.clone());
      return response;
    } catch (error) {
      const kept = await cache.match(request, { ignoreSearch: false });
      if (kept) return kept;
      throw error;
    }
  })());
});
