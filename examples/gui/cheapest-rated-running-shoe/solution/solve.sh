#!/bin/bash
# What a shopper who knows the answer would submit, straight to the shop.
set -e
post() { python3 -c "import sys, urllib.request, urllib.parse; urllib.request.urlopen(\"http://127.0.0.1:8080\" + sys.argv[1], urllib.parse.urlencode(dict(a.split(\"=\", 1) for a in sys.argv[2:])).encode())" "$@"; }
post /cart/add id=p06 qty=1
