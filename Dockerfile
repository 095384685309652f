# syntax=docker/dockerfile:1

# Compiles the TypeScript with the full dev toolchain; only dist/src leaves this stage.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
# everything tsconfig.build.json includes
COPY src ./src
RUN npm run build

# Production dependencies on their own, so that no dev tool reaches the image.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --omit=dev --no-audit --no-fund

# No shell, no package manager: node and the app. The distroless Node 24 image is
# Debian 12 like the build stages, so anything compiled there runs here.
FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
# the young generation fixed as the manifests fix it (docs/install.md "Sizing"), not sized from the node's memory
ENV NODE_ENV=production \
    NODE_OPTIONS="--enable-source-maps --max-semi-space-size=16"
# package.json says "type": "module", which dist/src/*.js needs to load as ESM
COPY package.json package-lock.json ./
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /app/dist/src ./dist/src
USER 65532:65532
EXPOSE 9443 8080
# distroless keeps node at /nodejs/bin/node, which is not on PATH
ENTRYPOINT ["/nodejs/bin/node", "/app/dist/src/cli.js"]
CMD ["serve"]
