# syntax=docker/dockerfile:1
# kernelserve-server image: built on the CUDA devel image with cuDNN, run on the matching runtime
# image with cuDNN (the cudnn platform of flash attention loads it).
#
#   docker build -t kernelserve:latest .
#   docker run --gpus all -p 50051:50051 -p 9464:9464 kernelserve:latest
#
# Both stages are Ubuntu 24.04 so that the runtime stage installs exactly the library
# packages the build stage linked against (same names, same versions: grpc 1.51, protobuf
# 3.21, abseil 20220623, as on the Debian 12 development machines).
ARG CUDA_VERSION=13.0.0
ARG BASE_OS=ubuntu24.04

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-devel-${BASE_OS} AS build
# The default build's architectures (CMakeLists.txt): 80 = A100, 90a = H100/H200 with the wgmma
# flash attention kernels that docs/PERFORMANCE.md measures (plain 90 lacks them). A test
# (tests/deploy/check_manifests.py) keeps the two lists equal.
ARG CUDA_ARCHITECTURES="80;90a"
ARG BUILD_TYPE=Release
ARG JOBS=
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      build-essential cmake pkg-config \
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler \
      libabsl-dev libhiredis-dev prometheus-cpp-dev libssl-dev nlohmann-json3-dev libcli11-dev \
      python3-pip \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# .dockerignore keeps build trees, tests, benchmarks and docs out of the context.
COPY . .
# The cudnn platform: cuDNN's headers come with the cudnn image, cudnn-frontend's from PyPI
# (pinned, hash-checked); the runtime image carries libcudnn, which the server loads.
RUN scripts/fetch-cudnn-frontend.sh \
 && cmake -S . -B /build -DCMAKE_BUILD_TYPE=${BUILD_TYPE} -DBUILD_TESTING=OFF \
      -DKERNELSERVE_CUDA=ON -DKERNELSERVE_CUDNN=ON -DCMAKE_CUDA_ARCHITECTURES="${CUDA_ARCHITECTURES}" \
 && cmake --build /build --target kernelserve-server kernelserve -j${JOBS:-$(nproc)} \
 && mkdir -p /out/bin \
 && cp /build/server/kernelserve-server /build/client/kernelserve /out/bin/ \
 && strip --strip-unneeded /out/bin/*
# The Ubuntu packages that own the shared libraries the two binaries load. CUDA libraries
# and the C/C++ runtime are already in the runtime image, so they are left out. The build
# fails here if one of the libraries the server needs is not among them.
RUN ldd /out/bin/kernelserve-server /out/bin/kernelserve \
      | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u | xargs realpath \
      | xargs dpkg -S 2>/dev/null | cut -d: -f1 | sort -u \
      | grep -Ev '^(cuda-|libcu|libnv|libc6$|libgcc-s1$|libstdc\+\+6$)' \
      > /out/runtime-packages.txt \
 && cat /out/runtime-packages.txt \
 && for want in 'libgrpc\+\+' 'libprotobuf[0-9]' 'libabsl' 'libhiredis' 'libprometheus-cpp-core' \
                'libcivetweb' 'libssl'; do \
      grep -Eq "^${want}" /out/runtime-packages.txt \
        || { echo "runtime package matching '${want}' not found" >&2; exit 1; }; \
    done

FROM nvidia/cuda:${CUDA_VERSION}-cudnn-runtime-${BASE_OS} AS runtime
ENV DEBIAN_FRONTEND=noninteractive
COPY --from=build /out/runtime-packages.txt /tmp/runtime-packages.txt
RUN apt-get update \
 && xargs -a /tmp/runtime-packages.txt apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/runtime-packages.txt \
 && useradd --system --uid 10001 --user-group --home-dir /var/lib/kernelserve --create-home \
      --shell /usr/sbin/nologin kernelserve
COPY --from=build /out/bin/ /usr/local/bin/
COPY deploy/docker/entrypoint.sh /usr/local/bin/kernelserve-entrypoint
USER 10001:10001
ENV HOME=/var/lib/kernelserve
WORKDIR /var/lib/kernelserve
VOLUME ["/var/lib/kernelserve"]
# gRPC, Prometheus /metrics.
EXPOSE 50051 9464
# grpc.health.v1 needs no token; with TLS on, override this with the CLI's --tls flags.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["kernelserve", "health", "--target", "127.0.0.1:50051", "--deadline", "3s"]
STOPSIGNAL SIGTERM
# The entrypoint execs kernelserve-server (it becomes PID 1 and gets SIGTERM itself). Later
# flags win, so CMD and `docker run IMAGE --flag=...` can override the listen addresses too.
ENTRYPOINT ["kernelserve-entrypoint", "--listen=0.0.0.0:50051", "--metrics-listen=0.0.0.0:9464"]
CMD ["--cache=file:/var/lib/kernelserve/configs.json", "--devices=all", "--grace-period=30s"]
