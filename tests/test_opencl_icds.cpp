// `all` skips OpenCL discovery only where every OpenCL driver the ICD loader would load is PoCL with
// CPU device drivers only (core/opencl_icds.hpp): fake vendor folders, PoCL libraries and driver
// folders in a temporary tree, read as ocl-icd reads them.
#include "core/opencl_icds.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

namespace tilestream {
namespace {

namespace fs = std::filesystem;
using detail::decide_opencl_under_all;
using detail::opencl_icd_environment;

class opencl_icds : public ::testing::Test {
protected:
    void SetUp() override {
        root_ = fs::temp_directory_path() / ("tilestream-icds-" + std::to_string(::getpid()) + "-" +
                                             ::testing::UnitTest::GetInstance()->current_test_info()->name());
        fs::remove_all(root_);
        fs::create_directories(root_ / "vendors");
        fs::create_directories(root_ / "lib" / "pocl");
        write(root_ / "lib" / "libpocl.so.2.10.0", "");
        fs::create_symlink("libpocl.so.2.10.0", root_ / "lib" / "libpocl.so.2");
        for (const char* d : {"basic", "pthread"}) write(root_ / "lib" / "pocl" / (std::string("libpocl-devices-") + d + ".so"), "");
        write(root_ / "vendors" / "pocl.icd", "libpocl.so.2\n");
        env_.default_vendor_dir = (root_ / "vendors").string();
        env_.library_dirs = {(root_ / "nothing-here").string(), (root_ / "lib").string()};
    }
    void TearDown() override { fs::remove_all(root_); }

    static void write(const fs::path& p, const std::string& text) {
        std::ofstream out(p);
        out << text;
        ASSERT_TRUE(out.good()) << p;
    }

    fs::path root_;
    opencl_icd_environment env_;
};

TEST_F(opencl_icds, OnlyPoclWithCpuDriversIsSkippedAndSaysWhy) {
    const auto d = decide_opencl_under_all(env_);
    EXPECT_TRUE(d.skip) << d.reason;
    EXPECT_NE(d.reason.find("only PoCL CPU devices"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("basic, pthread"), std::string::npos) << d.reason;
    EXPECT_NE(d.reason.find("name opencl"), std::string::npos) << d.reason;
    // The library named by its path, and PoCL's drivers found beside its real file.
    write(root_ / "vendors" / "pocl.icd", (root_ / "lib" / "libpocl.so.2").string());
    env_.library_dirs.clear();
    EXPECT_TRUE(decide_opencl_under_all(env_).skip) << decide_opencl_under_all(env_).reason;
}

TEST_F(opencl_icds, PoclWithAGpuDriverIsDiscovered) {
    for (const char* driver : {"cuda", "level0", "remote", "proxy"}) {
        const fs::path lib = root_ / "lib" / "pocl" / (std::string("libpocl-devices-") + driver + ".so");
        write(lib, "");
        const auto d = decide_opencl_under_all(env_);
        EXPECT_FALSE(d.skip) << driver;
        EXPECT_NE(d.reason.find(std::string("'") + driver + "'"), std::string::npos) << d.reason;
        fs::remove(lib);
    }
    EXPECT_TRUE(decide_opencl_under_all(env_).skip);
}

TEST_F(opencl_icds, AnotherVendorBesidePoclIsDiscovered) {
    write(root_ / "vendors" / "nvidia.icd", "libnvidia-opencl.so.1\n");
    const auto d = decide_opencl_under_all(env_);
    EXPECT_FALSE(d.skip);
    EXPECT_NE(d.reason.find("libnvidia-opencl.so.1"), std::string::npos) << d.reason;
    // A file without the .icd suffix is not read by the loader, nor here.
    fs::rename(root_ / "vendors" / "nvidia.icd", root_ / "vendors" / "nvidia.icd.disabled");
    EXPECT_TRUE(decide_opencl_under_all(env_).skip) << decide_opencl_under_all(env_).reason;
}

TEST_F(opencl_icds, PoclDevicesChoosesTheDrivers) {
    write(root_ / "lib" / "pocl" / "libpocl-devices-cuda.so", "");
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    env_.pocl_devices = "pthread";  // the GPU driver installed, not used
    EXPECT_TRUE(decide_opencl_under_all(env_).skip) << decide_opencl_under_all(env_).reason;
    env_.pocl_devices = "pthread cuda";
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
}

TEST_F(opencl_icds, WhatCannotBeToldIsDiscovered) {
    // PoCL's library not found.
    env_.library_dirs = {(root_ / "nothing-here").string()};
    auto d = decide_opencl_under_all(env_);
    EXPECT_FALSE(d.skip);
    EXPECT_NE(d.reason.find("cannot find libpocl.so.2"), std::string::npos) << d.reason;
    SetUp();
    // No driver folder (drivers built into libpocl: which, cannot be told).
    fs::remove_all(root_ / "lib" / "pocl");
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    fs::create_directories(root_ / "lib" / "pocl");
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);  // empty folder
    SetUp();
    // An empty .icd file.
    write(root_ / "vendors" / "empty.icd", "");
    d = decide_opencl_under_all(env_);
    EXPECT_FALSE(d.skip);
    EXPECT_NE(d.reason.find("empty.icd"), std::string::npos) << d.reason;
    // No ICD at all: nothing to skip (the loader finds no platform by itself).
    SetUp();
    fs::remove(root_ / "vendors" / "pocl.icd");
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
}

TEST_F(opencl_icds, TheLoadersVariablesAreRespected) {
    // OCL_ICD_VENDORS as a folder replaces the default one.
    fs::create_directories(root_ / "other");
    write(root_ / "other" / "intel.icd", "libintelocl.so\n");
    env_.ocl_icd_vendors = (root_ / "other").string();
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    env_.ocl_icd_vendors = (root_ / "vendors").string();
    EXPECT_TRUE(decide_opencl_under_all(env_).skip);
    // ... as a .icd file: by name in the vendors folder, or as a path.
    env_.ocl_icd_vendors = "pocl.icd";
    EXPECT_TRUE(decide_opencl_under_all(env_).skip) << decide_opencl_under_all(env_).reason;
    env_.ocl_icd_vendors = (root_ / "other" / "intel.icd").string();
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    // ... as the library itself.
    env_.ocl_icd_vendors = "libintelocl.so";
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    env_.ocl_icd_vendors = (root_ / "lib" / "libpocl.so.2").string();
    EXPECT_TRUE(decide_opencl_under_all(env_).skip) << decide_opencl_under_all(env_).reason;
    env_.ocl_icd_vendors = "";  // empty: as unset
    EXPECT_TRUE(decide_opencl_under_all(env_).skip);
    // OPENCL_VENDOR_PATH moves the default folder.
    env_.opencl_vendor_path = (root_ / "other").string();
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    env_.opencl_vendor_path.reset();
    // OCL_ICD_FILENAMES adds libraries.
    env_.ocl_icd_filenames = "libamdocl64.so";
    EXPECT_FALSE(decide_opencl_under_all(env_).skip);
    env_.ocl_icd_filenames = "libpocl.so.2:";
    EXPECT_TRUE(decide_opencl_under_all(env_).skip);
}

TEST_F(opencl_icds, ReadsTheProcessEnvironment) {
    const char* keep = std::getenv("OCL_ICD_VENDORS");
    const std::string saved = keep ? keep : "";
    ::setenv("OCL_ICD_VENDORS", (root_ / "vendors").string().c_str(), 1);
    opencl_icd_environment e = opencl_icd_environment::of_process();
    if (keep) ::setenv("OCL_ICD_VENDORS", saved.c_str(), 1);
    else ::unsetenv("OCL_ICD_VENDORS");
    EXPECT_EQ(e.ocl_icd_vendors.value_or(""), (root_ / "vendors").string());
    EXPECT_FALSE(e.library_dirs.empty());  // the system's library folders
    e.pocl_devices.reset();  // whatever this shell sets
    e.ocl_icd_filenames.reset();
    e.library_dirs.push_back((root_ / "lib").string());
    EXPECT_TRUE(decide_opencl_under_all(e).skip) << decide_opencl_under_all(e).reason;
}

}  // namespace
}  // namespace tilestream
