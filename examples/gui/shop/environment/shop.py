#!/usr/bin/env python3
"""Orchard's example shop: a small web store for browser tasks, served inside the sandbox.

Search, category/brand/price/rating filters, sorting, product pages, a cart and a checkout form.
Its state (the cart and the orders) is what graders check, through `GET /api/cart` and
`GET /api/orders` (compact JSON, stable key order). Python's standard library only.

    python3 shop.py [--port 8080] [--host 127.0.0.1]
"""

import argparse
import html
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# id, name, category, brand, price (cents), rating, reviews, colour
PRODUCTS = [
    ("p01", "Road Runner 3", "running-shoes", "Acme", 8999, 4.6, 312, "blue"),
    ("p02", "Trail Runner 2", "running-shoes", "Summit", 7450, 4.3, 128, "green"),
    ("p03", "Budget Jogger", "running-shoes", "Stride", 3999, 3.7, 54, "black"),
    ("p04", "Park Pacer", "running-shoes", "Stride", 5499, 4.1, 87, "grey"),
    ("p05", "Marathon Elite", "running-shoes", "Acme", 15900, 4.8, 501, "red"),
    ("p06", "City Sprint", "running-shoes", "Nimbus", 4850, 4.0, 33, "white"),
    ("p07", "Day Pack 20L", "backpacks", "Summit", 4500, 4.4, 210, "green"),
    ("p08", "Commuter 28L", "backpacks", "Nimbus", 6900, 4.7, 402, "black"),
    ("p09", "Ultralight 15L", "backpacks", "Acme", 2999, 4.5, 77, "orange"),
    ("p10", "Expedition 60L", "backpacks", "Summit", 18900, 4.2, 64, "blue"),
    ("p11", "School Bag", "backpacks", "Stride", 1999, 3.9, 150, "red"),
    ("p12", "Steel Bottle 750ml", "bottles", "Acme", 2450, 4.6, 820, "silver"),
    ("p13", "Glass Bottle 500ml", "bottles", "Nimbus", 1800, 4.2, 95, "clear"),
    ("p14", "Squeeze Bottle", "bottles", "Stride", 799, 3.5, 41, "blue"),
    ("p15", "Insulated Flask 1L", "bottles", "Summit", 3299, 4.9, 1204, "black"),
    ("p16", "Running Socks (3 pairs)", "accessories", "Stride", 1299, 4.4, 380, "white"),
    ("p17", "Sport Watch", "accessories", "Nimbus", 12900, 4.1, 260, "black"),
    ("p18", "Head Torch", "accessories", "Summit", 2799, 4.6, 190, "black"),
    ("p19", "Cap", "accessories", "Acme", 1500, 4.0, 58, "navy"),
    ("p20", "Armband Phone Holder", "accessories", "Stride", 999, 3.8, 112, "black"),
]
FIELDS = ("id", "name", "category", "brand", "price", "rating", "reviews", "colour")
CATALOG = {p[0]: dict(zip(FIELDS, p)) for p in PRODUCTS}
CATEGORIES = sorted({p["category"] for p in CATALOG.values()})
BRANDS = sorted({p["brand"] for p in CATALOG.values()})
SHIPPING = {"standard": 499, "express": 1299, "pickup": 0}

LOCK = threading.Lock()
CART = {}  # id -> quantity, in the order added
ORDERS = []


def money(cents):
    return f"${cents / 100:.2f}"


def stars(rating):
    return f"{rating:.1f} ★"


def page(title, body):
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body{{font:15px/1.4 sans-serif;margin:0;color:#222}} header{{background:#234;color:#fff;padding:10px 20px;display:flex;gap:20px;align-items:center}}
header a{{color:#fff}} main{{padding:16px 20px}} .grid{{display:flex;gap:24px}} aside{{min-width:220px}}
.card{{border:1px solid #ccc;border-radius:6px;padding:8px 12px;margin:0 0 10px}} .price{{font-weight:bold}}
label{{display:block;margin:6px 0}} input,select,button{{font-size:15px}}
</style></head><body>
<header><a href="/"><b>Orchard Outfitters</b></a>
<form action="/search" role="search"><input name="q" placeholder="Search products" aria-label="Search products"> <button>Search</button></form>
<a href="/cart" id="cart-link">Cart ({sum(CART.values())})</a></header>
<main>{body}</main></body></html>"""


def product_card(p):
    return (f'<div class="card"><a href="/product/{p["id"]}">{html.escape(p["name"])}</a> '
            f'<span class="price">{money(p["price"])}</span> · {stars(p["rating"])} ({p["reviews"]} reviews) · '
            f'{html.escape(p["brand"])}</div>')


def search(query):
    q = query.get("q", [""])[0].strip().lower()
    category = query.get("category", [""])[0]
    brand = query.get("brand", [""])[0]
    sort = query.get("sort", ["relevance"])[0]
    try:
        min_rating = float(query.get("min_rating", ["0"])[0] or 0)
        max_price = float(query.get("max_price", [""])[0] or 1e9) * 100
    except ValueError:
        min_rating, max_price = 0.0, 1e11
    hits = [p for p in CATALOG.values()
            if (not q or all(w in (p["name"] + " " + p["category"] + " " + p["brand"]).lower().replace("-", " ")
                             for w in q.split()))
            and (not category or p["category"] == category) and (not brand or p["brand"] == brand)
            and p["rating"] >= min_rating and p["price"] <= max_price]
    keys = {"price_asc": lambda p: (p["price"], p["id"]), "price_desc": lambda p: (-p["price"], p["id"]),
            "rating": lambda p: (-p["rating"], p["id"]), "name": lambda p: (p["name"], p["id"])}
    hits.sort(key=keys.get(sort, lambda p: p["id"]))

    def options(name, values, chosen, labels=None):
        out = [f'<option value="">Any {name}</option>']
        for v in values:
            sel = " selected" if v == chosen else ""
            out.append(f'<option value="{v}"{sel}>{html.escape((labels or {}).get(v, v))}</option>')
        return "".join(out)

    sorts = {"relevance": "Relevance", "price_asc": "Price: low to high", "price_desc": "Price: high to low",
             "rating": "Rating", "name": "Name"}
    filters = f"""<aside><form action="/search" id="filters"><input type="hidden" name="q" value="{html.escape(q)}">
<label>Category <select name="category">{options("category", CATEGORIES, category)}</select></label>
<label>Brand <select name="brand">{options("brand", BRANDS, brand)}</select></label>
<label>Minimum rating <select name="min_rating">{options("rating", ["3", "3.5", "4", "4.5"], query.get("min_rating", [""])[0])}</select></label>
<label>Maximum price ($) <input name="max_price" size="6" value="{html.escape(query.get("max_price", [""])[0])}"></label>
<label>Sort by <select name="sort">{"".join(f'<option value="{k}"{" selected" if k == sort else ""}>{v}</option>' for k, v in sorts.items())}</select></label>
<button>Apply filters</button></form></aside>"""
    results = "".join(product_card(p) for p in hits) or "<p>No products match.</p>"
    return page(f"Search: {q or 'all products'}",
                f'<div class="grid">{filters}<section><h1>{len(hits)} results</h1>{results}</section></div>')


def product(pid):
    p = CATALOG.get(pid)
    if not p:
        return None
    return page(p["name"], f"""<h1>{html.escape(p["name"])}</h1>
<p class="price">{money(p["price"])}</p><p>{stars(p["rating"])} from {p["reviews"]} reviews</p>
<p>Brand: {html.escape(p["brand"])} · Category: {html.escape(p["category"])} · Colour: {html.escape(p["colour"])}</p>
<form method="post" action="/cart/add"><input type="hidden" name="id" value="{p["id"]}">
<label>Quantity <input name="qty" type="number" min="1" max="9" value="1" size="3"></label>
<button id="add">Add to cart</button></form>
<p><a href="/size-guide" target="_blank">Size guide</a></p>""")


def cart_page():
    rows, total = [], 0
    for pid, qty in CART.items():
        p = CATALOG[pid]
        total += p["price"] * qty
        rows.append(f'<div class="card">{html.escape(p["name"])} × {qty} — {money(p["price"] * qty)} '
                    f'<form method="post" action="/cart/remove" style="display:inline"><input type="hidden" name="id" value="{pid}">'
                    f'<button>Remove</button></form></div>')
    if not rows:
        return page("Cart", "<h1>Your cart is empty</h1>")
    return page("Cart", f"""<h1>Cart</h1>{"".join(rows)}<p class="price">Subtotal: {money(total)}</p>
<form method="post" action="/cart/clear" onsubmit="return confirm('Empty the cart?')"><button>Empty cart</button></form>
<p><a href="/checkout">Proceed to checkout</a></p>""")


def checkout_page(error=""):
    ship = "".join(f'<option value="{k}">{k} ({money(v)})</option>' for k, v in SHIPPING.items())
    err = f'<p role="alert" style="color:#b00">{html.escape(error)}</p>' if error else ""
    return page("Checkout", f"""<h1>Checkout</h1>{err}<form method="post" action="/checkout">
<label>Full name <input name="name" autocomplete="off"></label>
<label>Email <input name="email" type="email"></label>
<label>Address <input name="address" size="40"></label>
<label>Shipping <select name="shipping">{ship}</select></label>
<button>Place order</button></form>""")


def api_cart():
    return {"items": [{"id": pid, "qty": qty} for pid, qty in CART.items()]}


def api_orders():
    return {"orders": ORDERS}


class Shop(BaseHTTPRequestHandler):
    server_version = "OrchardShop/1"

    def log_message(self, *args):
        pass

    def send(self, status, body, kind="text/html; charset=utf-8", headers=()):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def json(self, value):
        self.send(200, json.dumps(value, separators=(",", ":")), "application/json")

    def redirect(self, where):
        self.send(303, "", headers=[("Location", where)])

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query, keep_blank_values=True)
        with LOCK:
            if url.path == "/":
                links = "".join(f'<li><a href="/search?category={c}">{c.replace("-", " ").title()}</a></li>' for c in CATEGORIES)
                self.send(200, page("Orchard Outfitters", f"<h1>Welcome</h1><p>Shop by category:</p><ul>{links}</ul>"))
            elif url.path == "/search":
                self.send(200, search(query))
            elif url.path.startswith("/product/"):
                body = product(url.path.rsplit("/", 1)[-1])
                self.send(200 if body else 404, body or page("Not found", "<h1>No such product</h1>"))
            elif url.path == "/cart":
                self.send(200, cart_page())
            elif url.path == "/checkout":
                self.send(200, checkout_page())
            elif url.path.startswith("/order/"):
                n = url.path.rsplit("/", 1)[-1]
                order = next((o for o in ORDERS if o["number"] == n), None)
                self.send(200 if order else 404, page("Order placed" if order else "Not found",
                                                      f"<h1>Thank you! Order {html.escape(n)} is placed.</h1>" if order else "<h1>No such order</h1>"))
            elif url.path == "/size-guide":
                self.send(200, page("Size guide", "<h1>Size guide</h1><p>EU 42 = US 9 = UK 8.</p>"))
            elif url.path == "/api/cart":
                self.json(api_cart())
            elif url.path == "/api/orders":
                self.json(api_orders())
            elif url.path == "/api/products":
                self.json({"products": list(CATALOG.values())})
            elif url.path == "/health":
                self.send(200, "ok", "text/plain")
            else:
                self.send(404, page("Not found", "<h1>Not found</h1>"))

    def do_POST(self):
        url = urllib.parse.urlsplit(self.path)
        length = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
        form = urllib.parse.parse_qs(self.rfile.read(length).decode("utf-8", "replace"))
        field = lambda k: form.get(k, [""])[0].strip()
        with LOCK:
            if url.path == "/cart/add":
                pid = field("id")
                if pid not in CATALOG:
                    return self.send(400, page("Error", "<h1>No such product</h1>"))
                try:
                    qty = max(1, min(9, int(field("qty") or 1)))
                except ValueError:
                    qty = 1
                CART[pid] = min(9, CART.get(pid, 0) + qty)
                return self.redirect("/cart")
            if url.path == "/cart/remove":
                CART.pop(field("id"), None)
                return self.redirect("/cart")
            if url.path == "/cart/clear":
                CART.clear()
                return self.redirect("/cart")
            if url.path == "/checkout":
                if not CART:
                    return self.send(400, checkout_page("Your cart is empty."))
                missing = [k for k in ("name", "email", "address") if not field(k)]
                if missing or field("shipping") not in SHIPPING:
                    return self.send(400, checkout_page("Please fill in: " + ", ".join(missing or ["shipping"])))
                number = f"A{1001 + len(ORDERS)}"
                ORDERS.append({"number": number, "items": api_cart()["items"], "name": field("name"),
                               "email": field("email"), "address": field("address"), "shipping": field("shipping")})
                CART.clear()
                return self.redirect(f"/order/{number}")
            self.send(404, page("Not found", "<h1>Not found</h1>"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--host", default="127.0.0.1")
    args = parser.parse_args()
    ThreadingHTTPServer((args.host, args.port), Shop).serve_forever()


if __name__ == "__main__":
    main()
