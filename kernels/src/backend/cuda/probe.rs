//! The device's measured read bandwidth, the floor that decode speed is judged against.

use std::time::Instant;

use super::context::{Device, driver, grid};
use crate::backend::BackendError;

const OP: &str = "read_bandwidth";
/// Bytes streamed per run: far past the L2 cache of any current GPU.
const PROBE_BYTES: usize = 2 << 30;
const THREADS: u32 = 256;
/// Blocks per SM kept in flight: enough loads outstanding to saturate HBM.
const BLOCKS_PER_SM: usize = 8;
const WARMUP: usize = 2;
const RUNS: usize = 10;

/// Median bytes per second of a kernel that reads [`PROBE_BYTES`] once.
pub(super) fn read_bandwidth(device: &Device) -> Result<f64, BackendError> {
    let floats = PROBE_BYTES / 4;
    let data = device.stream.alloc_zeros::<f32>(floats).map_err(driver(OP))?;
    let blocks = device.sm_count * BLOCKS_PER_SM;
    let mut sums = device.stream.alloc_zeros::<f32>(blocks * THREADS as usize).map_err(driver(OP))?;
    let config = grid(OP, blocks, THREADS)?;
    let vectors = (floats / 4) as u64;
    let mut seconds = Vec::with_capacity(RUNS);
    for run in 0..WARMUP + RUNS {
        device.stream.synchronize().map_err(driver(OP))?;
        let start = Instant::now();
        let mut launch = device.launch(OP, "read_probe")?;
        launch.arg(&data).arg(&vectors).arg(&mut sums);
        // SAFETY: `data` holds `vectors` float4s; `sums` one float per launched thread.
        unsafe { launch.launch(config) }.map_err(driver(OP))?;
        device.stream.synchronize().map_err(driver(OP))?;
        if run >= WARMUP {
            seconds.push(start.elapsed().as_secs_f64());
        }
    }
    seconds.sort_by(f64::total_cmp);
    Ok(PROBE_BYTES as f64 / seconds[RUNS / 2])
}
