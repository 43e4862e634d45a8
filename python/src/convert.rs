//! Python arguments to core types. Wrong types raise `ArgumentTypeError` naming the argument;
//! wrong values go through the core's own validation (`InvalidArgumentError`).

use std::time::Duration;

use ironlock::{AcquireOptions, Config};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple, PyType};

use crate::error;

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();

const SECONDS: &str = "a number of seconds (int or float) or a datetime.timedelta";

/// Float seconds or `datetime.timedelta` → `Duration` (NaN, negative and infinite refused).
pub(crate) fn duration(name: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let py = v.py();
    let secs = if v.is_instance(TIMEDELTA.import(py, "datetime", "timedelta")?)? {
        v.call_method0("total_seconds")?.extract::<f64>()?
    } else if v.is_instance_of::<PyBool>()
        || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
    {
        return Err(error::wrong_type(name, SECONDS, v));
    } else {
        v.extract::<f64>()?
    };
    ironlock::duration_from_secs_f64(name, secs).map_err(|e| error::to_pyerr(py, e))
}

pub(crate) fn opt_duration(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match v {
        Some(v) if !v.is_none() => duration(name, v).map(Some),
        _ => Ok(None),
    }
}

fn count(name: &str, v: &Bound<'_, PyAny>) -> PyResult<u32> {
    if v.is_instance_of::<PyBool>() || !v.is_instance_of::<PyInt>() {
        return Err(error::wrong_type(name, "an int", v));
    }
    let n: i128 = v.extract()?;
    u32::try_from(n).map_err(|_| {
        error::invalid(
            v.py(),
            format!("{name}: must be between 0 and {}, got {n}", u32::MAX),
        )
    })
}

fn boolean(name: &str, v: &Bound<'_, PyAny>) -> PyResult<bool> {
    if !v.is_instance_of::<PyBool>() {
        return Err(error::wrong_type(name, "a bool", v));
    }
    v.extract()
}

fn text(name: &str, v: &Bound<'_, PyAny>) -> PyResult<String> {
    if !v.is_instance_of::<PyString>() {
        return Err(error::wrong_type(name, "a str", v));
    }
    v.extract::<String>()
        .map_err(|_| error::invalid(v.py(), format!("{name}: not valid UTF-8 (lone surrogate)")))
}

/// A str, or a list/tuple of str → names. `what` is `resources` or `nodes`.
fn names(what: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    if v.is_instance_of::<PyString>() {
        return Ok(vec![text(&format!("{what}[0]"), v)?]);
    }
    if !(v.is_instance_of::<PyList>() || v.is_instance_of::<PyTuple>()) {
        return Err(error::wrong_type(what, "a str or a list of str", v));
    }
    v.try_iter()?
        .enumerate()
        .map(|(i, item)| text(&format!("{what}[{i}]"), &item?))
        .collect()
}

/// Resource names; an empty list and empty or duplicate names are refused by the core.
pub(crate) fn resources(v: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let names = names("resources", v)?;
    ironlock::validate_resources(&names).map_err(|e| error::to_pyerr(v.py(), e))?;
    Ok(names)
}

pub(crate) fn resource(v: &Bound<'_, PyAny>) -> PyResult<String> {
    let name = text("resource", v)?;
    ironlock::validate_resources(&[name.as_str()]).map_err(|e| error::to_pyerr(v.py(), e))?;
    Ok(name)
}

pub(crate) fn token(v: &Bound<'_, PyAny>) -> PyResult<String> {
    text("token", v)
}

/// The manager's node URLs and keyword settings (SPEC §4) → a core `Config`.
pub(crate) fn config(
    nodes: &Bound<'_, PyAny>,
    settings: Option<&Bound<'_, PyDict>>,
) -> PyResult<Config> {
    let mut c = Config::new(names("nodes", nodes)?);
    let Some(settings) = settings else {
        return Ok(c);
    };
    for (key, v) in settings.iter() {
        let key: String = key.extract()?;
        let k = key.as_str();
        c = match k {
            "retry_count" => c.retry_count(count(k, &v)?),
            "retry_delay" => c.retry_delay(duration(k, &v)?),
            "retry_jitter" => c.retry_jitter(duration(k, &v)?),
            "drift_factor" => {
                if v.is_instance_of::<PyBool>()
                    || !(v.is_instance_of::<PyFloat>() || v.is_instance_of::<PyInt>())
                {
                    return Err(error::wrong_type(k, "a float", &v));
                }
                c.drift_factor(v.extract()?)
            }
            "drift_constant" => c.drift_constant(duration(k, &v)?),
            "node_timeout" => c.node_timeout(duration(k, &v)?),
            "connect_timeout" => c.connect_timeout(duration(k, &v)?),
            "max_ttl" => c.max_ttl(duration(k, &v)?),
            "restart_quarantine" => c.restart_quarantine(boolean(k, &v)?),
            "key_prefix" => c.key_prefix(text(k, &v)?),
            "min_validity" => c.min_validity(duration(k, &v)?),
            "max_extensions" => c.max_extensions(if v.is_none() {
                None
            } else {
                Some(count(k, &v)?)
            }),
            "extension_threshold" => c.extension_threshold(opt_duration(k, Some(&v))?),
            _ => {
                return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                    "unexpected keyword argument {k:?} (settings are: {})",
                    SETTINGS.join(", ")
                )));
            }
        };
    }
    Ok(c)
}

/// Every keyword setting, in SPEC §4 order.
pub(crate) const SETTINGS: [&str; 13] = [
    "retry_count",
    "retry_delay",
    "retry_jitter",
    "drift_factor",
    "drift_constant",
    "node_timeout",
    "connect_timeout",
    "max_ttl",
    "restart_quarantine",
    "key_prefix",
    "min_validity",
    "max_extensions",
    "extension_threshold",
];

/// `acquire`'s keyword arguments → core options.
pub(crate) fn acquire_options(
    wait: Option<&Bound<'_, PyAny>>,
    fencing: Option<&Bound<'_, PyAny>>,
    retry_count: Option<&Bound<'_, PyAny>>,
) -> PyResult<AcquireOptions> {
    Ok(AcquireOptions {
        wait: opt_duration("wait", wait)?,
        retry_count: match retry_count {
            Some(v) if !v.is_none() => Some(count("retry_count", v)?),
            _ => None,
        },
        fencing: match fencing {
            Some(v) if !v.is_none() => boolean("fencing", v)?,
            _ => false,
        },
    })
}
