"""How the inference traces in this folder were recorded: real traces the size of issue 27's held-out ones.

The held-out traces of issue 27 (H100 OWLv2, MI300X SD3.5) are not in ``../shared``; this records traces of the
same models' inference with the PyTorch profiler, ``record_shapes`` and ``with_stack`` on, as their users record
them: the shapes on every op, tens of thousands of Python-frame events, long argument strings. Weights are random
(nothing can be downloaded on the GPU machine), which changes no op, shape or kernel.

Run on a machine with CUDA, ``transformers`` and ``diffusers``: ``python bench/recorded/record.py OUTDIR [PART ...]``.
Parts (default all):
- ``owlv2``: ``Owlv2ForObjectDetection`` (the base patch-16 configuration, 960×960 images) in fp16, ``OWL_ITERS``
  forward passes of one image and 16 text queries.
- ``sd35``: the SD3.5 Medium transformer (24 MMDiT layers, the first 13 with dual attention) in bf16 at 1024×1024,
  ``SD_STEPS`` flow-matching steps with classifier-free guidance, then the VAE decode; recorded twice
  (``sd35_a``, ``sd35_b``), two captures of one job for the diff.
Writes ``NAME.json.gz`` per trace and ``recorded.json`` with what each part reported.
"""

import gzip
import json
import os
import shutil
import sys
import time
import traceback

import torch
from torch.profiler import ProfilerActivity, profile, record_function

OWL_ITERS = 21
SD_STEPS = 5
ACTIVITIES = [ProfilerActivity.CPU, ProfilerActivity.CUDA]


def export(prof, path):
    raw = path[: -len(".gz")]
    prof.export_chrome_trace(raw)
    size = os.path.getsize(raw)
    with open(raw, "rb") as src, gzip.open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)
    return {"json_mb": round(size / 1e6, 1), "gz_mb": round(os.path.getsize(path) / 1e6, 1)}


def owlv2(out):
    from transformers import Owlv2Config, Owlv2ForObjectDetection

    torch.manual_seed(0)
    config = Owlv2Config(vision_config={"image_size": 960, "patch_size": 16})
    net = Owlv2ForObjectDetection(config).eval().half().cuda()
    size = net.config.vision_config.image_size
    pixels = torch.randn(1, 3, size, size, device="cuda", dtype=torch.half)
    ids = torch.randint(0, net.config.text_config.vocab_size, (16, 16), device="cuda")
    mask = torch.ones_like(ids)
    with torch.inference_mode():
        for _ in range(2):
            net(input_ids=ids, pixel_values=pixels, attention_mask=mask)
        torch.cuda.synchronize()
        with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True) as prof:
            for i in range(OWL_ITERS):
                with record_function(f"## inference {i} ##"):
                    result = net(input_ids=ids, pixel_values=pixels, attention_mask=mask)
                    result.logits.float().sigmoid().max().item()
            torch.cuda.synchronize()
    return {"owlv2": export(prof, os.path.join(out, "owlv2.json.gz")), "image_size": size}


def sd35_parts():
    from diffusers import AutoencoderKL, FlowMatchEulerDiscreteScheduler, SD3Transformer2DModel

    torch.manual_seed(0)
    transformer = SD3Transformer2DModel(
        sample_size=128,
        patch_size=2,
        in_channels=16,
        num_layers=24,
        attention_head_dim=64,
        num_attention_heads=24,
        joint_attention_dim=4096,
        caption_projection_dim=1536,
        pooled_projection_dim=2048,
        out_channels=16,
        pos_embed_max_size=384,
        dual_attention_layers=tuple(range(13)),
        qk_norm="rms_norm",
    )
    vae = AutoencoderKL(
        in_channels=3,
        out_channels=3,
        down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4,
        block_out_channels=(128, 256, 512, 512),
        layers_per_block=2,
        latent_channels=16,
        use_quant_conv=False,
        use_post_quant_conv=False,
    )
    return (
        transformer.eval().to("cuda", torch.bfloat16),
        vae.eval().to("cuda", torch.bfloat16),
        FlowMatchEulerDiscreteScheduler(shift=3.0),
    )


def sd35_generate(transformer, vae, scheduler, steps):
    latents = torch.randn(1, 16, 128, 128, device="cuda", dtype=torch.bfloat16)
    prompt = torch.randn(2, 333, 4096, device="cuda", dtype=torch.bfloat16)
    pooled = torch.randn(2, 2048, device="cuda", dtype=torch.bfloat16)
    scheduler.set_timesteps(steps, device="cuda")
    for t in scheduler.timesteps:
        with record_function("denoise_step"):
            both = torch.cat([latents] * 2)
            noise = transformer(
                hidden_states=both,
                encoder_hidden_states=prompt,
                pooled_projections=pooled,
                timestep=t.expand(2),
                return_dict=False,
            )[0]
            uncond, cond = noise.chunk(2)
            latents = scheduler.step(uncond + 7.0 * (cond - uncond), t, latents, return_dict=False)[0]
    with record_function("vae_decode"):
        image = vae.decode(latents / 1.5305 + 0.0609, return_dict=False)[0]
    return image.float().clamp(-1, 1).mean().item()


def sd35(out):
    transformer, vae, scheduler = sd35_parts()
    report = {}
    with torch.inference_mode():
        sd35_generate(transformer, vae, scheduler, 2)
        torch.cuda.synchronize()
        for name in ("sd35_a", "sd35_b"):
            started = time.perf_counter()
            with profile(activities=ACTIVITIES, record_shapes=True, with_stack=True) as prof:
                sd35_generate(transformer, vae, scheduler, SD_STEPS)
                torch.cuda.synchronize()
            report[name] = export(prof, os.path.join(out, f"{name}.json.gz"))
            report[name]["profiled_s"] = round(time.perf_counter() - started, 2)
    return report


PARTS = {"owlv2": owlv2, "sd35": sd35}


def main(out, parts):
    os.makedirs(out, exist_ok=True)
    recorded = {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(),
    }
    for part in parts:
        try:
            recorded[part] = PARTS[part](out)
        except Exception:
            traceback.print_exc()
            recorded[part] = "failed"
        print(part, recorded[part], flush=True)
    with open(os.path.join(out, "recorded.json"), "w") as f:
        json.dump(recorded, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:] or list(PARTS))
