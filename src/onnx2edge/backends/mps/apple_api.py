"""The Apple signatures generated MPS packages may use: every public declaration of the CPU
model of Metal / MetalPerformanceShaders (backends/mps/sim), as Apple's Swift interface spells it.

One row a declaration: `owner | signature | iOS | header`.
- signature: normalised by swift_decls (argument labels and types, `{ get }` for read-only
  properties, `optional` for an Objective-C @optional protocol member, which the sim writes as a
  requirement with a default in a protocol extension). Types are listed with their superclass
  (classes) or inherited protocols.
- iOS: the `@available(iOS ...)` of the declaration in Apple's Swift interface (Xcode 12 SDK,
  iOS/MetalPerformanceShaders/MetalPerformanceShaders.swift and iOS/Metal/*.swift, as kept in
  the public repository DougGregor/swift-concurrency-objc; developer.apple.com/documentation/
  metalperformanceshaders gives the same); blank = the owner's. macOS availability follows
  from the headers' MPS_AVAILABLE_STARTING(macos(...), ios(...)) pairs: see MACOS.
- header: the Objective-C header that declares it (MetalPerformanceShaders.framework, Metal).

The CPU model declares exactly these (tests/test_mps.py::test_sim_declares_exactly_the_apple_table
parses the sim); generated code compiles against the sim and sees nothing else (the model's own
types and members are `@_spi(Sim)` or internal), so a package that typechecks here uses only
these declarations. Members newer than the package's deployment target (iOS 13 / macOS 10.15)
may only be implemented as optional protocol methods or used under `if #available`
(test_generated_code_respects_availability).
"""

from __future__ import annotations

from dataclasses import dataclass

DEPLOYMENT_IOS = "13.0"  # Package.swift: .iOS(.v13), .macOS(.v10_15)

# iOS version -> the macOS version the same MPS/Metal release shipped in (the pairs the headers
# write in MPS_AVAILABLE_STARTING / API_AVAILABLE).
MACOS = {
    "8.0": "10.11",
    "9.0": "10.11",
    "10.0": "10.13",
    "11.0": "10.13",
    "11.3": "10.13.4",
    "12.0": "10.14",
    "12.1": "10.14.1",
    "13.0": "10.15",
    "14.0": "11.0",
}

TABLE = """\
# --- Metal ---
- | func MTLCreateSystemDefaultDevice() -> MTLDevice? |  | MTLDevice.h / MTLCommandBuffer.h
- | typealias MTLCommandBufferHandler |  | MTLDevice.h / MTLCommandBuffer.h
MTLCommandBuffer | func addCompletedHandler(_: MTLCommandBufferHandler) |  | MTLCommandBuffer.h
MTLCommandBuffer | func commit() |  | MTLCommandBuffer.h
MTLCommandBuffer | func waitUntilCompleted() |  | MTLCommandBuffer.h
MTLCommandBuffer | func waitUntilScheduled() |  | MTLCommandBuffer.h
MTLCommandBuffer | protocol MTLCommandBuffer: NSObjectProtocol | 8.0 | MTLCommandBuffer.h
MTLCommandBuffer | var commandQueue: MTLCommandQueue { get } |  | MTLCommandBuffer.h
MTLCommandBuffer | var device: MTLDevice { get } |  | MTLCommandBuffer.h
MTLCommandBuffer | var label: String? |  | MTLCommandBuffer.h
MTLCommandBuffer | var status: MTLCommandBufferStatus { get } |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case committed |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case completed |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case enqueued |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case error |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case notEnqueued |  | MTLCommandBuffer.h
MTLCommandBufferStatus | case scheduled |  | MTLCommandBuffer.h
MTLCommandBufferStatus | enum MTLCommandBufferStatus: UInt | 8.0 | MTLCommandBuffer.h
MTLCommandQueue | func makeCommandBuffer() -> MTLCommandBuffer? |  | MTLCommandQueue.h
MTLCommandQueue | protocol MTLCommandQueue: NSObjectProtocol | 8.0 | MTLCommandQueue.h
MTLCommandQueue | var device: MTLDevice { get } |  | MTLCommandQueue.h
MTLCommandQueue | var label: String? |  | MTLCommandQueue.h
MTLDevice | func makeCommandQueue() -> MTLCommandQueue? |  | MTLDevice.h
MTLDevice | protocol MTLDevice: NSObjectProtocol | 8.0 | MTLDevice.h
MTLDevice | var name: String { get } |  | MTLDevice.h
MTLOrigin | init() |  | MTLTypes.h
MTLOrigin | init(x: Int, y: Int, z: Int) |  | MTLTypes.h
MTLOrigin | struct MTLOrigin |  | MTLTypes.h
MTLOrigin | var x: Int |  | MTLTypes.h
MTLOrigin | var y: Int |  | MTLTypes.h
MTLOrigin | var z: Int |  | MTLTypes.h
MTLRegion | init() |  | MTLTypes.h
MTLRegion | init(origin: MTLOrigin, size: MTLSize) |  | MTLTypes.h
MTLRegion | struct MTLRegion |  | MTLTypes.h
MTLRegion | var origin: MTLOrigin |  | MTLTypes.h
MTLRegion | var size: MTLSize |  | MTLTypes.h
MTLSize | init() |  | MTLTypes.h
MTLSize | init(width: Int, height: Int, depth: Int) |  | MTLTypes.h
MTLSize | struct MTLSize |  | MTLTypes.h
MTLSize | var depth: Int |  | MTLTypes.h
MTLSize | var height: Int |  | MTLTypes.h
MTLSize | var width: Int |  | MTLTypes.h
MTLTextureUsage | init(rawValue: UInt) |  | MTLTexture.h
MTLTextureUsage | static var pixelFormatView: MTLTextureUsage { get } |  | MTLTexture.h
MTLTextureUsage | static var renderTarget: MTLTextureUsage { get } |  | MTLTexture.h
MTLTextureUsage | static var shaderRead: MTLTextureUsage { get } |  | MTLTexture.h
MTLTextureUsage | static var shaderWrite: MTLTextureUsage { get } |  | MTLTexture.h
MTLTextureUsage | static var unknown: MTLTextureUsage { get } |  | MTLTexture.h
MTLTextureUsage | struct MTLTextureUsage | 9.0 | MTLTexture.h
MTLTextureUsage | var rawValue: UInt { get } |  | MTLTexture.h
# --- MetalPerformanceShaders ---
MPSCNNConvolution | class MPSCNNConvolution: MPSCNNKernel | 10.0 | MPSCNNConvolution.h
MPSCNNConvolution | init(device: MTLDevice, weights: MPSCNNConvolutionDataSource) | 11.0 | MPSCNNConvolution.h
MPSCNNConvolution | var dataSource: MPSCNNConvolutionDataSource { get } |  | MPSCNNConvolution.h
MPSCNNConvolution | var groups: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolution | var inputFeatureChannels: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolution | var outputFeatureChannels: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func biasTerms() -> UnsafeMutablePointer<Float>? |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func dataType() -> MPSDataType |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func descriptor() -> MPSCNNConvolutionDescriptor |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func label() -> String? |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func load() -> Bool |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func purge() |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | func weights() -> UnsafeMutableRawPointer |  | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | optional func kernelWeightsDataType() -> MPSDataType | 14.0 | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | optional func weightsLayout() -> MPSCNNConvolutionWeightsLayout | 13.0 | MPSCNNConvolution.h
MPSCNNConvolutionDataSource | protocol MPSCNNConvolutionDataSource: NSCopying, NSObjectProtocol | 10.0 | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | class MPSCNNConvolutionDescriptor: NSObject | 10.0 | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | func copy(with: NSZone?) -> Any |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | func setBatchNormalizationParametersForInferenceWithMean(_: UnsafePointer<Float>?, variance: UnsafePointer<Float>?, gamma: UnsafePointer<Float>?, beta: UnsafePointer<Float>?, epsilon: Float) | 11.0 | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | init(kernelWidth: Int, kernelHeight: Int, inputFeatureChannels: Int, outputFeatureChannels: Int) | 11.0 | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var dilationRateX: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var dilationRateY: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var fusedNeuronDescriptor: MPSNNNeuronDescriptor | 11.3 | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var groups: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var inputFeatureChannels: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var kernelHeight: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var kernelWidth: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var outputFeatureChannels: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var strideInPixelsX: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionDescriptor | var strideInPixelsY: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionGradientStateNode | class MPSCNNConvolutionGradientStateNode: MPSNNGradientStateNode | 11.3 | MPSNNGraphNodes.h
MPSCNNConvolutionNode | class MPSCNNConvolutionNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNConvolutionNode | init(source: MPSNNImageNode, weights: MPSCNNConvolutionDataSource) |  | MPSNNGraphNodes.h
MPSCNNConvolutionNode | var accumulatorPrecision: MPSNNConvolutionAccumulatorPrecisionOption | 12.0 | MPSNNGraphNodes.h
MPSCNNConvolutionTranspose | class MPSCNNConvolutionTranspose: MPSCNNKernel | 11.0 | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | init(device: MTLDevice, weights: MPSCNNConvolutionDataSource) |  | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var dataSource: MPSCNNConvolutionDataSource { get } | 13.0 | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var groups: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var inputFeatureChannels: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var kernelOffsetX: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var kernelOffsetY: Int |  | MPSCNNConvolution.h
MPSCNNConvolutionTranspose | var outputFeatureChannels: Int { get } |  | MPSCNNConvolution.h
MPSCNNConvolutionTransposeNode | class MPSCNNConvolutionTransposeNode: MPSCNNConvolutionNode | 11.0 | MPSNNGraphNodes.h
MPSCNNConvolutionTransposeNode | init(source: MPSNNImageNode, convolutionGradientState: MPSCNNConvolutionGradientStateNode?, weights: MPSCNNConvolutionDataSource) | 11.3 | MPSNNGraphNodes.h
MPSCNNConvolutionWeightsLayout | case OHWI |  | MPSCNNConvolution.h
MPSCNNConvolutionWeightsLayout | enum MPSCNNConvolutionWeightsLayout: UInt32 | 13.0 | MPSCNNConvolution.h
MPSCNNCrossChannelNormalizationNode | class MPSCNNCrossChannelNormalizationNode: MPSCNNNormalizationNode | 11.0 | MPSNNGraphNodes.h
MPSCNNCrossChannelNormalizationNode | init(source: MPSNNImageNode, kernelSize: Int) |  | MPSNNGraphNodes.h
MPSCNNCrossChannelNormalizationNode | var kernelSizeInFeatureChannels: Int |  | MPSNNGraphNodes.h
MPSCNNDepthWiseConvolutionDescriptor | class MPSCNNDepthWiseConvolutionDescriptor: MPSCNNConvolutionDescriptor | 11.0 | MPSCNNConvolution.h
MPSCNNDepthWiseConvolutionDescriptor | var channelMultiplier: Int { get } |  | MPSCNNConvolution.h
MPSCNNFullyConnected | class MPSCNNFullyConnected: MPSCNNConvolution | 10.0 | MPSCNNConvolution.h
MPSCNNFullyConnectedNode | class MPSCNNFullyConnectedNode: MPSCNNConvolutionNode | 11.0 | MPSNNGraphNodes.h
MPSCNNInstanceNormalizationDataSource | func beta() -> UnsafeMutablePointer<Float>? |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | func gamma() -> UnsafeMutablePointer<Float>? |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | func label() -> String? |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | init?(coder: NSCoder) |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | optional func epsilon() -> Float |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | optional func load() -> Bool | 13.0 | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | optional func purge() | 13.0 | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | protocol MPSCNNInstanceNormalizationDataSource: NSCopying, NSObjectProtocol | 11.3 | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationDataSource | var numberOfFeatureChannels: Int { get } |  | MPSCNNInstanceNormalization.h
MPSCNNInstanceNormalizationNode | class MPSCNNInstanceNormalizationNode: MPSNNFilterNode | 11.3 | MPSNNGraphNodes.h
MPSCNNInstanceNormalizationNode | init(source: MPSNNImageNode, dataSource: MPSCNNInstanceNormalizationDataSource) |  | MPSNNGraphNodes.h
MPSCNNKernel | class MPSCNNKernel: MPSKernel | 10.0 | MPSCNNKernel.h
MPSCNNKernel | func encode(commandBuffer: MTLCommandBuffer, sourceImage: MPSImage, destinationImage: MPSImage) |  | MPSCNNKernel.h
MPSCNNKernel | var clipRect: MTLRegion |  | MPSCNNKernel.h
MPSCNNKernel | var destinationFeatureChannelOffset: Int |  | MPSCNNKernel.h
MPSCNNKernel | var destinationImageAllocator: MPSImageAllocator | 11.0 | MPSCNNKernel.h
MPSCNNKernel | var dilationRateX: Int { get } |  | MPSCNNKernel.h
MPSCNNKernel | var dilationRateY: Int { get } |  | MPSCNNKernel.h
MPSCNNKernel | var edgeMode: MPSImageEdgeMode |  | MPSCNNKernel.h
MPSCNNKernel | var kernelHeight: Int { get } |  | MPSCNNKernel.h
MPSCNNKernel | var kernelWidth: Int { get } |  | MPSCNNKernel.h
MPSCNNKernel | var offset: MPSOffset |  | MPSCNNKernel.h
MPSCNNKernel | var padding: MPSNNPadding | 11.0 | MPSCNNKernel.h
MPSCNNKernel | var sourceFeatureChannelOffset: Int |  | MPSCNNKernel.h
MPSCNNKernel | var strideInPixelsX: Int { get } |  | MPSCNNKernel.h
MPSCNNKernel | var strideInPixelsY: Int { get } |  | MPSCNNKernel.h
MPSCNNLogSoftMaxNode | class MPSCNNLogSoftMaxNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNLogSoftMaxNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronAbsoluteNode | class MPSCNNNeuronAbsoluteNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronAbsoluteNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronELUNode | class MPSCNNNeuronELUNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronELUNode | init(source: MPSNNImageNode, a: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronExponentialNode | class MPSCNNNeuronExponentialNode: MPSCNNNeuronNode | 11.3 | MPSNNGraphNodes.h
MPSCNNNeuronExponentialNode | init(source: MPSNNImageNode, a: Float, b: Float, c: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronGeLUNode | class MPSCNNNeuronGeLUNode: MPSCNNNeuronNode | 13.0 | MPSNNGraphNodes.h
MPSCNNNeuronGeLUNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronHardSigmoidNode | class MPSCNNNeuronHardSigmoidNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronHardSigmoidNode | init(source: MPSNNImageNode, a: Float, b: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronLinearNode | class MPSCNNNeuronLinearNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronLinearNode | init(source: MPSNNImageNode, a: Float, b: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronLogarithmNode | class MPSCNNNeuronLogarithmNode: MPSCNNNeuronNode | 11.3 | MPSNNGraphNodes.h
MPSCNNNeuronLogarithmNode | init(source: MPSNNImageNode, a: Float, b: Float, c: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronNode | class MPSCNNNeuronNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronNode | init(source: MPSNNImageNode, descriptor: MPSNNNeuronDescriptor) | 12.0 | MPSNNGraphNodes.h
MPSCNNNeuronNode | var a: Float { get } |  | MPSNNGraphNodes.h
MPSCNNNeuronNode | var b: Float { get } |  | MPSNNGraphNodes.h
MPSCNNNeuronNode | var c: Float { get } |  | MPSNNGraphNodes.h
MPSCNNNeuronPReLUNode | class MPSCNNNeuronPReLUNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronPReLUNode | init(source: MPSNNImageNode, aData: Data) |  | MPSNNGraphNodes.h
MPSCNNNeuronPowerNode | class MPSCNNNeuronPowerNode: MPSCNNNeuronNode | 11.3 | MPSNNGraphNodes.h
MPSCNNNeuronPowerNode | init(source: MPSNNImageNode, a: Float, b: Float, c: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronReLUNNode | class MPSCNNNeuronReLUNNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronReLUNNode | init(source: MPSNNImageNode, a: Float, b: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronReLUNode | class MPSCNNNeuronReLUNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronReLUNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronReLUNode | init(source: MPSNNImageNode, a: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronSigmoidNode | class MPSCNNNeuronSigmoidNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronSigmoidNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronSoftPlusNode | class MPSCNNNeuronSoftPlusNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronSoftPlusNode | init(source: MPSNNImageNode, a: Float, b: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronSoftSignNode | class MPSCNNNeuronSoftSignNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronSoftSignNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNNeuronTanHNode | class MPSCNNNeuronTanHNode: MPSCNNNeuronNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNeuronTanHNode | init(source: MPSNNImageNode, a: Float, b: Float) |  | MPSNNGraphNodes.h
MPSCNNNeuronType | case ELU |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case absolute |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case exponential | 11.3 | MPSCNNNeuronType.h
MPSCNNNeuronType | case geLU | 13.0 | MPSCNNNeuronType.h
MPSCNNNeuronType | case hardSigmoid |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case linear |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case logarithm | 11.3 | MPSCNNNeuronType.h
MPSCNNNeuronType | case none |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case pReLU |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case power | 11.3 | MPSCNNNeuronType.h
MPSCNNNeuronType | case reLU |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case reLUN |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case sigmoid |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case softPlus |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case softSign |  | MPSCNNNeuronType.h
MPSCNNNeuronType | case tanH |  | MPSCNNNeuronType.h
MPSCNNNeuronType | enum MPSCNNNeuronType: Int32 | 11.0 | MPSCNNNeuronType.h
MPSCNNNormalizationNode | class MPSCNNNormalizationNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNNormalizationNode | var alpha: Float |  | MPSNNGraphNodes.h
MPSCNNNormalizationNode | var beta: Float |  | MPSNNGraphNodes.h
MPSCNNNormalizationNode | var delta: Float |  | MPSNNGraphNodes.h
MPSCNNPooling | class MPSCNNPooling: MPSCNNKernel | 10.0 | MPSCNNPooling.h
MPSCNNPooling | init(device: MTLDevice, kernelWidth: Int, kernelHeight: Int, strideInPixelsX: Int, strideInPixelsY: Int) |  | MPSCNNPooling.h
MPSCNNPoolingAverage | class MPSCNNPoolingAverage: MPSCNNPooling | 10.0 | MPSCNNPooling.h
MPSCNNPoolingAverage | var zeroPadSizeX: Int |  | MPSCNNPooling.h
MPSCNNPoolingAverage | var zeroPadSizeY: Int |  | MPSCNNPooling.h
MPSCNNPoolingAverageNode | class MPSCNNPoolingAverageNode: MPSCNNPoolingNode | 11.0 | MPSNNGraphNodes.h
MPSCNNPoolingMax | class MPSCNNPoolingMax: MPSCNNPooling | 10.0 | MPSCNNPooling.h
MPSCNNPoolingMaxNode | class MPSCNNPoolingMaxNode: MPSCNNPoolingNode | 11.0 | MPSNNGraphNodes.h
MPSCNNPoolingNode | class MPSCNNPoolingNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNPoolingNode | init(source: MPSNNImageNode, filterSize: Int) |  | MPSNNGraphNodes.h
MPSCNNPoolingNode | init(source: MPSNNImageNode, filterSize: Int, stride: Int) |  | MPSNNGraphNodes.h
MPSCNNPoolingNode | init(source: MPSNNImageNode, kernelWidth: Int, kernelHeight: Int, strideInPixelsX: Int, strideInPixelsY: Int) |  | MPSNNGraphNodes.h
MPSCNNPoolingNode | var kernelHeight: Int { get } | 12.0 | MPSNNGraphNodes.h
MPSCNNPoolingNode | var kernelWidth: Int { get } | 12.0 | MPSNNGraphNodes.h
MPSCNNPoolingNode | var strideInPixelsX: Int { get } | 12.0 | MPSNNGraphNodes.h
MPSCNNPoolingNode | var strideInPixelsY: Int { get } | 12.0 | MPSNNGraphNodes.h
MPSCNNSoftMaxNode | class MPSCNNSoftMaxNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNSoftMaxNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSCNNUpsamplingBilinearNode | class MPSCNNUpsamplingBilinearNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNUpsamplingBilinearNode | init(source: MPSNNImageNode, integerScaleFactorX: Int, integerScaleFactorY: Int, alignCorners: Bool) |  | MPSNNGraphNodes.h
MPSCNNUpsamplingBilinearNode | var alignCorners: Bool { get } |  | MPSNNGraphNodes.h
MPSCNNUpsamplingBilinearNode | var scaleFactorX: Double { get } |  | MPSNNGraphNodes.h
MPSCNNUpsamplingBilinearNode | var scaleFactorY: Double { get } |  | MPSNNGraphNodes.h
MPSCNNUpsamplingNearestNode | class MPSCNNUpsamplingNearestNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSCNNUpsamplingNearestNode | init(source: MPSNNImageNode, integerScaleFactorX: Int, integerScaleFactorY: Int) |  | MPSNNGraphNodes.h
MPSCNNUpsamplingNearestNode | var scaleFactorX: Double { get } |  | MPSNNGraphNodes.h
MPSCNNUpsamplingNearestNode | var scaleFactorY: Double { get } |  | MPSNNGraphNodes.h
MPSDataLayout | case HeightxWidthxFeatureChannels |  | MPSImage.h
MPSDataLayout | case featureChannelsxHeightxWidth |  | MPSImage.h
MPSDataLayout | enum MPSDataLayout: UInt | 11.0 | MPSImage.h
MPSDataType | case float16 | 11.0 | MPSCoreTypes.h
MPSDataType | case float32 |  | MPSCoreTypes.h
MPSDataType | case floatBit |  | MPSCoreTypes.h
MPSDataType | case int16 |  | MPSCoreTypes.h
MPSDataType | case int32 |  | MPSCoreTypes.h
MPSDataType | case int8 |  | MPSCoreTypes.h
MPSDataType | case invalid |  | MPSCoreTypes.h
MPSDataType | case normalizedBit | 11.0 | MPSCoreTypes.h
MPSDataType | case signedBit |  | MPSCoreTypes.h
MPSDataType | case uInt16 |  | MPSCoreTypes.h
MPSDataType | case uInt32 |  | MPSCoreTypes.h
MPSDataType | case uInt8 |  | MPSCoreTypes.h
MPSDataType | case unorm1 | 11.0 | MPSCoreTypes.h
MPSDataType | case unorm8 | 11.0 | MPSCoreTypes.h
MPSDataType | enum MPSDataType: UInt32 | 10.0 | MPSCoreTypes.h
MPSHandle | func label() -> String? |  | MPSNNGraphNodes.h
MPSHandle | protocol MPSHandle: NSObjectProtocol, NSSecureCoding | 11.0 | MPSNNGraphNodes.h
MPSImage | class MPSImage: NSObject | 10.0 | MPSImage.h
MPSImage | class func defaultAllocator() -> MPSImageAllocator |  | MPSImage.h
MPSImage | func readBytes(_: UnsafeMutableRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) | 11.0 | MPSImage.h
MPSImage | func synchronize(on: MTLCommandBuffer) | 11.3 | MPSImage.h
MPSImage | func writeBytes(_: UnsafeRawPointer, dataLayout: MPSDataLayout, imageIndex: Int) | 11.0 | MPSImage.h
MPSImage | init(device: MTLDevice, imageDescriptor: MPSImageDescriptor) |  | MPSImage.h
MPSImage | var device: MTLDevice { get } |  | MPSImage.h
MPSImage | var featureChannelFormat: MPSImageFeatureChannelFormat { get } |  | MPSImage.h
MPSImage | var featureChannels: Int { get } |  | MPSImage.h
MPSImage | var height: Int { get } |  | MPSImage.h
MPSImage | var label: String? |  | MPSImage.h
MPSImage | var numberOfImages: Int { get } |  | MPSImage.h
MPSImage | var usage: MTLTextureUsage { get } |  | MPSImage.h
MPSImage | var width: Int { get } |  | MPSImage.h
MPSImageAllocator | func image(for: MTLCommandBuffer, imageDescriptor: MPSImageDescriptor, kernel: MPSKernel) -> MPSImage |  | MPSImage.h
MPSImageAllocator | protocol MPSImageAllocator: NSObjectProtocol, NSSecureCoding | 10.0 | MPSImage.h
MPSImageCoordinate | init() |  | MPSCoreTypes.h
MPSImageCoordinate | init(x: Int, y: Int, channel: Int) |  | MPSCoreTypes.h
MPSImageCoordinate | struct MPSImageCoordinate |  | MPSCoreTypes.h
MPSImageCoordinate | var channel: Int |  | MPSCoreTypes.h
MPSImageCoordinate | var x: Int |  | MPSCoreTypes.h
MPSImageCoordinate | var y: Int |  | MPSCoreTypes.h
MPSImageDescriptor | class MPSImageDescriptor: NSObject | 10.0 | MPSImage.h
MPSImageDescriptor | init(channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int) |  | MPSImage.h
MPSImageDescriptor | init(channelFormat: MPSImageFeatureChannelFormat, width: Int, height: Int, featureChannels: Int, numberOfImages: Int, usage: MTLTextureUsage) |  | MPSImage.h
MPSImageDescriptor | var channelFormat: MPSImageFeatureChannelFormat |  | MPSImage.h
MPSImageDescriptor | var featureChannels: Int |  | MPSImage.h
MPSImageDescriptor | var height: Int |  | MPSImage.h
MPSImageDescriptor | var numberOfImages: Int |  | MPSImage.h
MPSImageDescriptor | var usage: MTLTextureUsage |  | MPSImage.h
MPSImageDescriptor | var width: Int |  | MPSImage.h
MPSImageEdgeMode | case clamp |  | MPSCoreTypes.h
MPSImageEdgeMode | case constant | 12.1 | MPSCoreTypes.h
MPSImageEdgeMode | case mirror | 12.1 | MPSCoreTypes.h
MPSImageEdgeMode | case mirrorWithEdge | 12.1 | MPSCoreTypes.h
MPSImageEdgeMode | case zero |  | MPSCoreTypes.h
MPSImageEdgeMode | enum MPSImageEdgeMode: UInt | 9.0 | MPSCoreTypes.h
MPSImageFeatureChannelFormat | case float16 |  | MPSImage.h
MPSImageFeatureChannelFormat | case float32 |  | MPSImage.h
MPSImageFeatureChannelFormat | case none |  | MPSImage.h
MPSImageFeatureChannelFormat | case unorm16 |  | MPSImage.h
MPSImageFeatureChannelFormat | case unorm8 |  | MPSImage.h
MPSImageFeatureChannelFormat | enum MPSImageFeatureChannelFormat: UInt | 10.0 | MPSImage.h
MPSKernel | class MPSKernel: NSObject | 9.0 | MPSKernel.h
MPSKernel | func copy(with: NSZone?) -> Any |  | MPSKernel.h
MPSKernel | init(device: MTLDevice) |  | MPSKernel.h
MPSKernel | var device: MTLDevice { get } |  | MPSKernel.h
MPSKernel | var label: String? |  | MPSKernel.h
MPSKernel | var options: MPSKernelOptions |  | MPSKernel.h
MPSKernelOptions | init(rawValue: UInt) |  | MPSKernel.h
MPSKernelOptions | struct MPSKernelOptions | 9.0 | MPSKernel.h
MPSKernelOptions | var rawValue: UInt { get } |  | MPSKernel.h
MPSNNAdditionNode | class MPSNNAdditionNode: MPSNNBinaryArithmeticNode | 11.0 | MPSNNGraphNodes.h
MPSNNBilinearScaleNode | class MPSNNBilinearScaleNode: MPSNNScaleNode | 11.0 | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | class MPSNNBinaryArithmeticNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | init(leftSource: MPSNNImageNode, rightSource: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | init(sources: [MPSNNImageNode]) |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var bias: Float |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var maximumValue: Float |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var minimumValue: Float |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var primaryScale: Float |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var primaryStrideInFeatureChannels: Int |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var primaryStrideInPixelsX: Int |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var primaryStrideInPixelsY: Int |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var secondaryScale: Float |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var secondaryStrideInFeatureChannels: Int |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var secondaryStrideInPixelsX: Int |  | MPSNNGraphNodes.h
MPSNNBinaryArithmeticNode | var secondaryStrideInPixelsY: Int |  | MPSNNGraphNodes.h
MPSNNConcatenationNode | class MPSNNConcatenationNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSNNConcatenationNode | init(sources: [MPSNNImageNode]) |  | MPSNNGraphNodes.h
MPSNNConvolutionAccumulatorPrecisionOption | init(rawValue: UInt) |  | MPSNeuralNetworkTypes.h
MPSNNConvolutionAccumulatorPrecisionOption | static var float: MPSNNConvolutionAccumulatorPrecisionOption { get } |  | MPSNeuralNetworkTypes.h
MPSNNConvolutionAccumulatorPrecisionOption | static var half: MPSNNConvolutionAccumulatorPrecisionOption { get } |  | MPSNeuralNetworkTypes.h
MPSNNConvolutionAccumulatorPrecisionOption | struct MPSNNConvolutionAccumulatorPrecisionOption | 11.3 | MPSNeuralNetworkTypes.h
MPSNNConvolutionAccumulatorPrecisionOption | var rawValue: UInt { get } |  | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | class MPSNNDefaultPadding: NSObject | 11.0 | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | func encode(with: NSCoder) |  | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | func paddingMethod() -> MPSNNPaddingMethod |  | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | init(method: MPSNNPaddingMethod) |  | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | init?(coder: NSCoder) |  | MPSNeuralNetworkTypes.h
MPSNNDefaultPadding | static var supportsSecureCoding: Bool { get } |  | MPSNeuralNetworkTypes.h
MPSNNDivisionNode | class MPSNNDivisionNode: MPSNNBinaryArithmeticNode | 11.0 | MPSNNGraphNodes.h
MPSNNFilterNode | class MPSNNFilterNode: NSObject | 11.0 | MPSNNGraphNodes.h
MPSNNFilterNode | var label: String? |  | MPSNNGraphNodes.h
MPSNNFilterNode | var paddingPolicy: MPSNNPadding |  | MPSNNGraphNodes.h
MPSNNFilterNode | var resultImage: MPSNNImageNode { get } |  | MPSNNGraphNodes.h
MPSNNGradientStateNode | class MPSNNGradientStateNode: MPSNNStateNode | 11.3 | MPSNNGraphNodes.h
MPSNNGraph | class MPSNNGraph: MPSKernel | 11.0 | MPSNNGraph.h
MPSNNGraph | func encode(to: MTLCommandBuffer, sourceImages: [MPSImage]) -> MPSImage? |  | MPSNNGraph.h
MPSNNGraph | func encode(to: MTLCommandBuffer, sourceImages: [MPSImage], sourceStates: [MPSState]?, intermediateImages: NSMutableArray?, destinationStates: NSMutableArray?) -> MPSImage? |  | MPSNNGraph.h
MPSNNGraph | func executeAsync(withSourceImages: [MPSImage], completionHandler: (MPSImage?, Error?) -> Void) -> MPSImage |  | MPSNNGraph.h
MPSNNGraph | func readCountForSourceImage(at: Int) -> Int | 12.1 | MPSNNGraph.h
MPSNNGraph | init?(device: MTLDevice, resultImage: MPSNNImageNode, resultImageIsNeeded: Bool) |  | MPSNNGraph.h
MPSNNGraph | init?(device: MTLDevice, resultImages: [MPSNNImageNode], resultsAreNeeded: UnsafeMutablePointer<ObjCBool>?) | 13.0 | MPSNNGraph.h
MPSNNGraph | var destinationImageAllocator: MPSImageAllocator |  | MPSNNGraph.h
MPSNNGraph | var format: MPSImageFeatureChannelFormat |  | MPSNNGraph.h
MPSNNGraph | var intermediateImageHandles: [MPSHandle]? { get } |  | MPSNNGraph.h
MPSNNGraph | var resultImageIsNeeded: Bool { get } |  | MPSNNGraph.h
MPSNNGraph | var sourceImageHandles: [MPSHandle] { get } |  | MPSNNGraph.h
MPSNNImageNode | class MPSNNImageNode: NSObject | 11.0 | MPSNNGraphNodes.h
MPSNNImageNode | init(handle: MPSHandle?) |  | MPSNNGraphNodes.h
MPSNNImageNode | var exportFromGraph: Bool |  | MPSNNGraphNodes.h
MPSNNImageNode | var format: MPSImageFeatureChannelFormat |  | MPSNNGraphNodes.h
MPSNNImageNode | var handle: MPSHandle? |  | MPSNNGraphNodes.h
MPSNNImageNode | var imageAllocator: MPSImageAllocator |  | MPSNNGraphNodes.h
MPSNNImageNode | var stopGradient: Bool | 12.0 | MPSNNGraphNodes.h
MPSNNImageNode | var synchronizeResource: Bool | 11.3 | MPSNNGraphNodes.h
MPSNNMultiplicationNode | class MPSNNMultiplicationNode: MPSNNBinaryArithmeticNode | 11.0 | MPSNNGraphNodes.h
MPSNNNeuronDescriptor | class MPSNNNeuronDescriptor: NSObject | 11.3 | MPSCNNNeuron.h
MPSNNNeuronDescriptor | class func cnnNeuronDescriptor(with: MPSCNNNeuronType) -> MPSNNNeuronDescriptor |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | class func cnnNeuronDescriptor(with: MPSCNNNeuronType, a: Float) -> MPSNNNeuronDescriptor |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | class func cnnNeuronDescriptor(with: MPSCNNNeuronType, a: Float, b: Float) -> MPSNNNeuronDescriptor |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | class func cnnNeuronDescriptor(with: MPSCNNNeuronType, a: Float, b: Float, c: Float) -> MPSNNNeuronDescriptor |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | class func cnnNeuronPReLUDescriptor(with: Data, noCopy: Bool) -> MPSNNNeuronDescriptor |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | func copy(with: NSZone?) -> Any |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | var a: Float |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | var b: Float |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | var c: Float |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | var data: Data? |  | MPSCNNNeuron.h
MPSNNNeuronDescriptor | var neuronType: MPSCNNNeuronType |  | MPSCNNNeuron.h
MPSNNPadNode | class MPSNNPadNode: MPSNNFilterNode | 12.1 | MPSNNGraphNodes.h
MPSNNPadNode | init(source: MPSNNImageNode, paddingSizeBefore: MPSImageCoordinate, paddingSizeAfter: MPSImageCoordinate, edgeMode: MPSImageEdgeMode) |  | MPSNNGraphNodes.h
MPSNNPadNode | var fillValue: Float |  | MPSNNGraphNodes.h
MPSNNPadding | func paddingMethod() -> MPSNNPaddingMethod |  | MPSNeuralNetworkTypes.h
MPSNNPadding | optional func destinationImageDescriptor(forSourceImages: [MPSImage], sourceStates: [MPSState]?, for: MPSKernel, suggestedDescriptor: MPSImageDescriptor) -> MPSImageDescriptor |  | MPSNeuralNetworkTypes.h
MPSNNPadding | optional func label() -> String |  | MPSNeuralNetworkTypes.h
MPSNNPadding | protocol MPSNNPadding: NSObjectProtocol, NSSecureCoding | 11.0 | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | init(rawValue: UInt) |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var addRemainderToBottomLeft: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var addRemainderToBottomRight: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var addRemainderToTopRight: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var alignBottomRight: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var alignTopLeft: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var centered: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var custom: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var customWhitelistForNodeFusion: MPSNNPaddingMethod { get } | 12.0 | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var excludeEdges: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var sizeFull: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var sizeSame: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var topLeft: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | static var validOnly: MPSNNPaddingMethod { get } |  | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | struct MPSNNPaddingMethod | 11.0 | MPSNeuralNetworkTypes.h
MPSNNPaddingMethod | var rawValue: UInt { get } |  | MPSNeuralNetworkTypes.h
MPSNNReductionColumnMaxNode | class MPSNNReductionColumnMaxNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionColumnMeanNode | class MPSNNReductionColumnMeanNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionColumnMinNode | class MPSNNReductionColumnMinNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionColumnSumNode | class MPSNNReductionColumnSumNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionFeatureChannelsMaxNode | class MPSNNReductionFeatureChannelsMaxNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionFeatureChannelsMeanNode | class MPSNNReductionFeatureChannelsMeanNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionFeatureChannelsMinNode | class MPSNNReductionFeatureChannelsMinNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionFeatureChannelsSumNode | class MPSNNReductionFeatureChannelsSumNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionRowMaxNode | class MPSNNReductionRowMaxNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionRowMeanNode | class MPSNNReductionRowMeanNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionRowMinNode | class MPSNNReductionRowMinNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionRowSumNode | class MPSNNReductionRowSumNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNReductionSpatialMeanNode | class MPSNNReductionSpatialMeanNode: MPSNNUnaryReductionNode | 12.1 | MPSNNGraphNodes.h
MPSNNScaleNode | class MPSNNScaleNode: MPSNNFilterNode | 11.0 | MPSNNGraphNodes.h
MPSNNScaleNode | init(source: MPSNNImageNode, outputSize: MTLSize) |  | MPSNNGraphNodes.h
MPSNNStateNode | class MPSNNStateNode: NSObject | 11.0 | MPSNNGraphNodes.h
MPSNNSubtractionNode | class MPSNNSubtractionNode: MPSNNBinaryArithmeticNode | 11.0 | MPSNNGraphNodes.h
MPSNNUnaryReductionNode | class MPSNNUnaryReductionNode: MPSNNFilterNode | 12.1 | MPSNNGraphNodes.h
MPSNNUnaryReductionNode | init(source: MPSNNImageNode) |  | MPSNNGraphNodes.h
MPSOffset | init() |  | MPSCoreTypes.h
MPSOffset | init(x: Int, y: Int, z: Int) |  | MPSCoreTypes.h
MPSOffset | struct MPSOffset |  | MPSCoreTypes.h
MPSOffset | var x: Int |  | MPSCoreTypes.h
MPSOffset | var y: Int |  | MPSCoreTypes.h
MPSOffset | var z: Int |  | MPSCoreTypes.h
MPSState | class MPSState: NSObject | 11.0 | MPSState.h
MPSTemporaryImage | class MPSTemporaryImage: MPSImage | 10.0 | MPSImage.h
MPSTemporaryImage | var readCount: Int |  | MPSImage.h
"""


@dataclass(frozen=True)
class Entry:
    module: str
    owner: str
    signature: str
    ios: str  # effective: the row's, else its owner's; "" for C structs (no availability)
    header: str

    @property
    def macos(self) -> str:
        return MACOS.get(self.ios, "")


def _version(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")) if v else (0,)


def entries() -> list[Entry]:
    rows: list[tuple[str, str, str, str, str]] = []
    module = ""
    for line in TABLE.splitlines():
        if line.startswith("# --- "):
            module = line.split()[2]
            continue
        if not line.strip():
            continue
        owner, sig, ios, header = (p.strip() for p in line.split(" | "))
        rows.append((module, owner, sig, ios, header))
    owner_ios = {
        o: i
        for _, o, s, i, _ in rows
        if s.split()[0] in ("class", "struct", "enum", "protocol")
        and not s.startswith("class func")
    }
    owner_ios["-"] = "8.0"
    return [Entry(m, o, s, i or owner_ios.get(o, ""), h) for m, o, s, i, h in rows]


def newer_than_deployment() -> list[Entry]:
    """Declarations a package deploying to iOS 13 / macOS 10.15 cannot call unguarded."""
    return [e for e in entries() if _version(e.ios) > _version(DEPLOYMENT_IOS)]
