#!/bin/bash
cat > /workspace/wc.sh <<'SH'
#!/bin/bash
wc -w < "$1" | tr -d ' '
SH
chmod +x /workspace/wc.sh
