# syntax=docker/dockerfile:1

# Compiles the TypeScript with the full dev toolchain and bundles the CLI with what it imports
# (rolldown.config.mjs); only that bundle, dist/image, leaves this stage.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN --mount=type=cache,target=/root/.npm npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json rolldown.config.mjs ./
# everything tsconfig.build.json includes
COPY src ./src
RUN npm run build:image

# No shell, no package manager: node and the app. The distroless Node 24 image is
# Debian 12 like the build stages, so anything compiled there runs here.
FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
# the young generation fixed as the manifests fix it (docs/install.md "Sizing"), not sized from the node's memory
ENV NODE_ENV=production \
    NODE_OPTIONS="--max-semi-space-size=16"
# package.json says "type": "module", which the bundle needs to load as ESM, and gives the version
COPY package.json ./
# the bundle carries its dependencies: no node_modules
COPY --from=build /app/dist/image ./dist/image
USER 65532:65532
EXPOSE 9443 8080
# distroless keeps node at /nodejs/bin/node, which is not on PATH
ENTRYPOINT ["/nodejs/bin/node", "/app/dist/image/cli.js"]
CMD ["serve"]
