#!/bin/bash
# The gold patch.
set -e
cd /workspace
git apply <<'PATCH'
diff --git a/text.py b/text.py
--- a/text.py
+++ b/text.py
@@ -1,9 +1,12 @@
 """Text helpers for URLs."""
 
+import re
+
 
 def slugify(title):
     """`Hello, World!` -> `hello-world`."""
-    return title.lower().replace(" ", "-")
+    words = re.findall(r"[a-z0-9]+", title.lower())
+    return "-".join(words)
 
 
 def shout(text):
PATCH
