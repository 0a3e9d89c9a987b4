#!/bin/bash
# The gold patch.
set -e
cd /workspace
git apply <<'PATCH'
diff --git a/stats.py b/stats.py
--- a/stats.py
+++ b/stats.py
@@ -6,7 +6,9 @@ def total(values):
 
 
 def mean(values):
-    return sum(values) // len(values)
+    if not values:
+        return 0.0
+    return sum(values) / len(values)
 
 
 def maximum(values):
PATCH
