//! Compute, then draw, on one device: the app creates its wgpu device as any renderer does,
//! opens gpu-arena on it (`Context::from_wgpu`), computes particle positions and colours with a
//! kernel into an arena array, and draws that array straight from arena memory with its own
//! render pipeline (a vertex buffer, plus a uniform from the arena) into an off-screen
//! texture: no copy, no host round trip. `AppWork` hands the arrays to the pass and submits it,
//! so the arrays can be dropped right after. The image is read back, compared with a CPU
//! rasterisation of the same particles, and written to `target/render_interop.png`.
//!
//! The rasterisation rule that makes the comparison exact: every particle is a 1-pixel point
//! (`PointList`) at a pixel centre, so it covers exactly that pixel; colours are `k / 255`,
//! which UNORM8 stores as `k`; later particles overwrite earlier ones (primitive order, no
//! blending). Any pixel that differs fails the run, as does any validation error.
//!
//! `cargo run --release --example render_interop -- [--particles N] [--size PX]`

use gpu_arena::{bytemuck, wgpu, AppDevice, ArenaConfig, Context, DeviceRequirements};
use lexopt::prelude::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

#[path = "flags/mod.rs"]
mod flags;

const USAGE: &str = "usage: render_interop [--particles N] [--size PX]

Computes particles with a gpu-arena kernel, draws them with a wgpu render pipeline on the
same device, checks every pixel against the CPU and writes target/render_interop.png.
  --particles N  how many particles, 1 to 65536 (default 4096)
  --size PX      the image's width and height, 8 to 2048 (default 256)
  -h, --help     this text";

/// `--particles` and `--size`.
fn options() -> (u32, u32) {
    flags::parse_or_exit(USAGE, |parser| {
        let (mut particles, mut size) = (4096, 256);
        while let Some(arg) = parser.next()? {
            match arg {
                Long("particles") => particles = flags::in_range(parser, "particles", 1..=65536)?,
                Long("size") => size = flags::in_range(parser, "size", 8..=2048)?,
                Short('h') | Long("help") => return Ok(None),
                _ => return Err(arg.unexpected()),
            }
        }
        Ok(Some((particles, size)))
    })
}

/// One particle as the kernel writes it and the vertex buffer reads it: a position in pixels
/// (at a pixel centre) and an RGBA colour.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Particle {
    pos: [f32; 2],
    color: [f32; 4],
}

/// The pixel and colour of particle `i` in a `size`×`size` image: integer hashes (Knuth's
/// multiplicative hash, which lands some particles on the same pixel, so drawing order
/// matters), so the kernel and the CPU agree exactly.
const PARTICLE_RULE: &str = "
fn pixel(i: u32, size: u32) -> vec2<u32> {
    let at = ((i * 2654435761u) >> 8u) % (size * size);
    return vec2<u32>(at % size, at / size);
}
fn channel(i: u32, k: u32) -> u32 { return (i * (37u + 14u * k) + 60u * k) % 256u; }
";

fn cpu_particle(i: u32, size: u32) -> ([u32; 2], [u8; 4]) {
    let at = (i.wrapping_mul(2_654_435_761) >> 8) % (size * size);
    let (px, py) = (at % size, at / size);
    let channel = |k: u32| (i.wrapping_mul(37 + 14 * k).wrapping_add(60 * k) % 256) as u8;
    ([px, py], [channel(0), channel(1), channel(2), 255])
}

const PARTICLES: &str = "
struct Params { n: u32, size: u32 }
@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> out: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if (i >= p.n) { return; }
    let xy = pixel(i, p.size);
    let base = i * 6u;
    out[base + 0u] = f32(xy.x) + 0.5;
    out[base + 1u] = f32(xy.y) + 0.5;
    out[base + 2u] = f32(channel(i, 0u)) / 255.0;
    out[base + 3u] = f32(channel(i, 1u)) / 255.0;
    out[base + 4u] = f32(channel(i, 2u)) / 255.0;
    out[base + 5u] = 1.0;
}
";

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
#[bytemuck(crate = "gpu_arena::bytemuck")]
struct Params {
    n: u32,
    size: u32,
}

/// The app's render pipeline: points from the vertex buffer, pixels to clip space with the
/// viewport size from a uniform (an arena array too).
const DRAW: &str = "
struct Viewport { size: vec4<f32> }
@group(0) @binding(0) var<uniform> viewport: Viewport;
struct Out { @builtin(position) pos: vec4<f32>, @location(0) color: vec4<f32> }
@vertex fn vs(@location(0) pos: vec2<f32>, @location(1) color: vec4<f32>) -> Out {
    var o: Out;
    let s = viewport.size.xy;
    o.pos = vec4<f32>(pos.x / s.x * 2.0 - 1.0, 1.0 - pos.y / s.y * 2.0, 0.0, 1.0);
    o.color = color;
    return o;
}
@fragment fn fs(v: Out) -> @location(0) vec4<f32> { return v.color; }
";

/// Counts Vulkan validation errors (the Khronos layer reports through wgpu-hal at error
/// level) and prints every warning and error.
struct ValidationCounter;
static VALIDATION_ERRORS: AtomicUsize = AtomicUsize::new(0);

impl log::Log for ValidationCounter {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Warn
    }
    fn log(&self, record: &log::Record) {
        if !self.enabled(record.metadata()) {
            return;
        }
        let message = record.args().to_string();
        if record.level() == log::Level::Error
            && (record.target().starts_with("wgpu_hal::vulkan")
                || message.contains("VUID-")
                || message.contains("Validation Error"))
        {
            VALIDATION_ERRORS.fetch_add(1, Ordering::SeqCst);
        }
        eprintln!("[{}] {}: {message}", record.level(), record.target());
    }
    fn flush(&self) {}
}

fn main() -> anyhow::Result<()> {
    let (particles, size) = options();
    log::set_logger(&ValidationCounter).map_err(|e| anyhow::anyhow!("{e}"))?;
    log::set_max_level(log::LevelFilter::Warn);
    let config = ArenaConfig::from_env()?;

    // The app: an instance, an adapter and a device with what gpu-arena lists and what the
    // app needs itself (a 2-D texture of `size`), its own uncaptured-error handler.
    let app = open_app_device(&config, size)?;
    let app_errors = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&app_errors);
    app.device
        .on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            eprintln!("the app's handler: {error}");
            counter.fetch_add(1, Ordering::SeqCst);
        }));

    // gpu-arena on the app's device.
    let ctx = Context::from_wgpu(app.clone(), config)?;
    println!(
        "gpu-arena on the app's device: {} ({}), arena through {}",
        ctx.adapter_info().name,
        ctx.adapter_info().backend,
        if ctx.is_vulkan() {
            "gpu-allocator"
        } else {
            "plain wgpu buffers"
        }
    );
    let kernel = ctx.kernel(&format!("{PARTICLE_RULE}{PARTICLES}"), "main")?;
    let mut out = ctx.zeros::<f32>(&[particles as usize * 6])?;
    ctx.launch(&kernel)
        .params(&Params { n: particles, size })
        .arg_mut(&mut out)
        .grid_for(particles)
        .run()?;
    let viewport = ctx.device_put(&[size as f32, size as f32, 0.0, 0.0], &[4])?;

    // The app's render pass over the arena's arrays.
    let texture = render(&ctx, &app.device, &out, &viewport, particles, size)?;
    // Safe right after the submission: AppWork recorded both arrays as used by it.
    drop(out);
    drop(viewport);
    let pixels = read_back(&app, &texture, size)?;

    // The CPU's rasterisation of the same particles.
    let mut expected = vec![0u8; (size * size * 4) as usize];
    for i in 0..particles {
        let ([x, y], color) = cpu_particle(i, size);
        let at = ((y * size + x) * 4) as usize;
        expected[at..at + 4].copy_from_slice(&color);
    }
    let differ = pixels
        .chunks(4)
        .zip(expected.chunks(4))
        .filter(|(a, b)| a != b)
        .count();
    let lit = expected.chunks(4).filter(|p| p[3] != 0).count();
    let png = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/render_interop.png");
    std::fs::write(&png, png::encode_rgba(size, size, &pixels))?;
    println!(
        "{particles} particle{}, {size}x{size} image: {lit} pixel{} lit, {differ} differ from the CPU rasterisation; wrote {}",
        if particles == 1 { "" } else { "s" },
        if lit == 1 { "" } else { "s" },
        png.display()
    );
    drop(ctx);
    let validation = VALIDATION_ERRORS.load(Ordering::SeqCst);
    let uncaptured = app_errors.load(Ordering::SeqCst);
    println!("validation errors: {validation}, errors at the app's handler: {uncaptured}");
    anyhow::ensure!(
        differ == 0,
        "{differ} pixels differ from the CPU rasterisation"
    );
    anyhow::ensure!(validation == 0 && uncaptured == 0, "errors were reported");
    Ok(())
}

/// What an app does at start-up: its own instance, adapter and device, with gpu-arena's
/// requirements merged into its own (a texture of `size`, and the limits its renderer wants).
fn open_app_device(config: &ArenaConfig, size: u32) -> anyhow::Result<AppDevice> {
    let flags = match config.validation {
        true => wgpu::InstanceFlags::VALIDATION,
        false => wgpu::InstanceFlags::empty(),
    };
    // Vulkan where there is one (as gpu-arena's own choice does), then any backend.
    let request = |backends: wgpu::Backends| {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
            backends,
            flags,
            ..wgpu::InstanceDescriptor::new_without_display_handle()
        });
        pollster::block_on(instance.request_adapter(&Default::default()))
    };
    let adapter = match config.backend {
        gpu_arena::BackendChoice::Auto => {
            request(wgpu::Backends::VULKAN).or_else(|_| request(wgpu::Backends::all()))?
        }
        choice => request(choice.backends())?,
    };
    let needs = DeviceRequirements::for_config(config);
    let mut limits = needs.limits.clone();
    limits.max_texture_dimension_2d = limits.max_texture_dimension_2d.max(size);
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("render_interop's device"),
        required_features: needs.features | (adapter.features() & needs.optional_features),
        required_limits: limits,
        ..Default::default()
    }))?;
    Ok(AppDevice::new(&adapter, &device, &queue))
}

const FORMAT: wgpu::TextureFormat = wgpu::TextureFormat::Rgba8Unorm;

/// Draws the particles into a new `size`×`size` texture, submitting through `AppWork`.
fn render(
    ctx: &Context,
    device: &wgpu::Device,
    particles: &gpu_arena::DeviceArray<f32>,
    viewport: &gpu_arena::DeviceArray<f32>,
    count: u32,
    size: u32,
) -> gpu_arena::Result<wgpu::Texture> {
    let texture = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("particles"),
        size: wgpu::Extent3d {
            width: size,
            height: size,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: FORMAT,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let shader = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("draw particles"),
        source: wgpu::ShaderSource::Wgsl(DRAW.into()),
    });
    let pipeline = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("draw particles"),
        layout: None,
        vertex: wgpu::VertexState {
            module: &shader,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[Some(wgpu::VertexBufferLayout {
                array_stride: std::mem::size_of::<Particle>() as u64,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes: &wgpu::vertex_attr_array![0 => Float32x2, 1 => Float32x4],
            })],
        },
        primitive: wgpu::PrimitiveState {
            topology: wgpu::PrimitiveTopology::PointList,
            ..Default::default()
        },
        depth_stencil: None,
        multisample: Default::default(),
        fragment: Some(wgpu::FragmentState {
            module: &shader,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(FORMAT.into())],
        }),
        multiview_mask: None,
        cache: None,
    });
    let mut work = ctx.app_work();
    let bind_group = device.create_bind_group(&wgpu::BindGroupDescriptor {
        label: Some("viewport"),
        layout: &pipeline.get_bind_group_layout(0),
        entries: &[wgpu::BindGroupEntry {
            binding: 0,
            resource: work.uniform(viewport)?,
        }],
    });
    let view = texture.create_view(&Default::default());
    let mut encoder = device.create_command_encoder(&Default::default());
    {
        let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
            label: Some("particles"),
            color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                view: &view,
                depth_slice: None,
                resolve_target: None,
                ops: wgpu::Operations {
                    load: wgpu::LoadOp::Clear(wgpu::Color::TRANSPARENT),
                    store: wgpu::StoreOp::Store,
                },
            })],
            ..Default::default()
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind_group, &[]);
        pass.set_vertex_buffer(0, work.vertex_buffer(particles)?);
        pass.draw(0..count, 0..1);
    }
    work.submit([encoder.finish()])?;
    Ok(texture)
}

/// The texture's RGBA bytes, read back by the app through its own mappable buffer.
fn read_back(app: &AppDevice, texture: &wgpu::Texture, size: u32) -> anyhow::Result<Vec<u8>> {
    let row = (size * 4).next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let buffer = app.device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("readback"),
        size: u64::from(row * size),
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::MAP_READ,
        mapped_at_creation: false,
    });
    let mut encoder = app.device.create_command_encoder(&Default::default());
    encoder.copy_texture_to_buffer(
        texture.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(row),
                rows_per_image: None,
            },
        },
        texture.size(),
    );
    app.queue.submit([encoder.finish()]);
    let (sender, receiver) = std::sync::mpsc::channel();
    buffer
        .slice(..)
        .map_async(wgpu::MapMode::Read, move |r| drop(sender.send(r)));
    app.device.poll(wgpu::PollType::wait_indefinitely())?;
    receiver.recv()??;
    let data = buffer.slice(..).get_mapped_range()?;
    Ok((0..size as usize)
        .flat_map(|y| {
            let start = y * row as usize;
            data[start..start + size as usize * 4].to_vec()
        })
        .collect())
}

/// A PNG writer of our own (no allowed crate writes PNG): RGBA8, one IDAT of stored
/// (uncompressed) deflate blocks, with the CRC-32 and Adler-32 the format asks for.
mod png {
    /// The largest stored deflate block (its length is 16 bits).
    const MAX_STORED: usize = 65535;

    /// The PNG file of a `width`×`height` RGBA8 image given row by row.
    pub fn encode_rgba(width: u32, height: u32, rgba: &[u8]) -> Vec<u8> {
        // Each row starts with filter type 0 (none).
        let mut raw = Vec::with_capacity(rgba.len() + height as usize);
        for row in rgba.chunks(width as usize * 4) {
            raw.push(0);
            raw.extend_from_slice(row);
        }
        // zlib: header (deflate, 32K window, no dictionary), stored blocks, Adler-32.
        let mut zlib = vec![0x78, 0x01];
        let mut blocks = raw.chunks(MAX_STORED).peekable();
        while let Some(block) = blocks.next() {
            zlib.push(u8::from(blocks.peek().is_none()));
            let len = block.len() as u16;
            zlib.extend_from_slice(&len.to_le_bytes());
            zlib.extend_from_slice(&(!len).to_le_bytes());
            zlib.extend_from_slice(block);
        }
        zlib.extend_from_slice(&adler32(&raw).to_be_bytes());
        let mut header = Vec::with_capacity(13);
        header.extend_from_slice(&width.to_be_bytes());
        header.extend_from_slice(&height.to_be_bytes());
        // 8 bits per channel, colour type 6 (RGBA), deflate, filter 0, no interlace.
        header.extend_from_slice(&[8, 6, 0, 0, 0]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        for (kind, data) in [(b"IHDR", &header[..]), (b"IDAT", &zlib), (b"IEND", &[])] {
            png.extend_from_slice(&(data.len() as u32).to_be_bytes());
            let start = png.len();
            png.extend_from_slice(kind);
            png.extend_from_slice(data);
            let crc = crc32(&png[start..]);
            png.extend_from_slice(&crc.to_be_bytes());
        }
        png
    }

    /// CRC-32 (ISO 3309, the polynomial PNG names), bit by bit: images here are small.
    fn crc32(bytes: &[u8]) -> u32 {
        let mut crc = !0u32;
        for &byte in bytes {
            crc ^= u32::from(byte);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xEDB8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    /// Adler-32 (RFC 1950) of the uncompressed data.
    fn adler32(bytes: &[u8]) -> u32 {
        let (mut a, mut b) = (1u32, 0u32);
        for &byte in bytes {
            a = (a + u32::from(byte)) % 65521;
            b = (b + a) % 65521;
        }
        (b << 16) | a
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn crc_and_adler_match_their_check_values() {
            assert_eq!(super::crc32(b"123456789"), 0xCBF4_3926);
            assert_eq!(super::adler32(b"Wikipedia"), 0x11E6_0398);
        }
    }
}
