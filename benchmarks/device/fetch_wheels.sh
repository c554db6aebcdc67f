#!/usr/bin/env bash
# Downloads, on this (networked) machine, the wheels the offline H200 machine
# lacks into .whl/ (ignored by git; name it in the device tool's `carry`):
# the machine's image has torch, triton and transformers but not kernels,
# liger-kernel or the local Hub server's packages. scripts/env.sh installs
# them there. Pins: the versions the committed H200 results were taken with,
# except transformers: 5.22.2 (as requirements-dev.txt), the newest release
# whose kernels route accepts kernels 0.17.x; those results used 5.24.0.
# accelerate (and its psutil): transformers' device_map, which the KernelConfig
# route on a GPU needs (tests/test_transformers_route.py -m gpu).
# sigstore and cryptography, with their dependencies the image lacks: `kernels.cli` imports
# them (kernels verify-signature), so the tests that run the kernels command need them.
set -euo pipefail
cd "$(dirname "$0")/../.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    "${platforms[@]}" -d .whl \
    kernels==0.17.2 huggingface_hub==2.4.0 transformers==5.22.2 liger_kernel==0.8.5 hf_xet==1.8.0 \
    tomlkit==0.15.2 fastapi==0.165.0 starlette==1.10.0 uvicorn==0.55.0 pydantic==2.14.4 pydantic-core==2.50.5 \
    annotated-types==0.8.0 annotated-doc==0.0.7 typing-inspection==0.4.5 typing_extensions==4.16.0 \
    opentelemetry-api==1.45.2 httpx2==2.16.2 httpcore2==2.16.2 truststore==0.10.5 idna==3.20 anyio==4.16.0 \
    click==8.5.1 tabulate==0.10.0 accelerate==1.16.0 psutil==7.2.2 \
    cryptography==50.0.2 cffi==2.1.1 pycparser==3.12 sigstore==4.5.1 id==1.6.1 urllib3==2.8.0 pyjwt==2.15.1 \
    rfc8785==0.1.4 rfc3161-client==1.0.9 sigstore-models==0.0.6 sigstore-rekor-types==0.0.18 tuf==7.0.1 \
    securesystemslib==1.6.0 platformdirs==4.14.9
echo "wheels in .whl/: $(ls .whl | wc -l)"
