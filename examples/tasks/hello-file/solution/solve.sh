#!/bin/bash
echo "Hello, Orchard!" > /workspace/hello.txt
