#!/bin/bash
# The gold patch.
set -e
cd /workspace
git apply <<'PATCH'
diff --git a/count.go b/count.go
--- a/count.go
+++ b/count.go
@@ -5,10 +5,7 @@ import "strings"
 
 // Count returns how many words `text` holds; words are separated by whitespace.
 func Count(text string) int {
-	if text == "" {
-		return 0
-	}
-	return len(strings.Split(text, " "))
+	return len(strings.Fields(text))
 }
 
 // Longest returns the longest word, the first of equals.
PATCH
